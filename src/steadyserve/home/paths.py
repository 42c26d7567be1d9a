"""Where SteadyServe keeps its files under ``$STEADY_HOME``.

Every process (CLI, controller, load balancer, replica) derives paths from the
same home, so two homes on one machine never see each other's state.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_HOME = "~/.steady"

PRIVATE_UMASK = 0o077
"""The controller's umask: what it creates in the home is its owner's only (0700
folders, 0600 files), whatever the umask of the shell that started it."""
_user_umask: int | None = None


def make_files_private() -> None:
    """Create files owner-only from now on; remember the umask the user had, which
    the user's own processes (``setup``, replicas) keep (:func:`user_umask`)."""
    global _user_umask
    previous = os.umask(PRIVATE_UMASK)
    if _user_umask is None:
        _user_umask = previous


def user_umask() -> int:
    """The umask a service's ``setup`` and replicas run with: the user's, not the
    controller's private one (-1, "leave it", before make_files_private)."""
    return -1 if _user_umask is None else _user_umask


@dataclass(frozen=True)
class Home:
    """The layout of one ``STEADY_HOME`` directory."""

    root: Path

    @classmethod
    def from_env(cls, override: str | os.PathLike[str] | None = None) -> Home:
        raw = override if override is not None else os.environ.get("STEADY_HOME", DEFAULT_HOME)
        return cls(Path(raw).expanduser().resolve())

    def ensure(self) -> Home:
        """Create the home with owner-only permissions (it holds logs and tokens)."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        return self

    @property
    def db_path(self) -> Path:
        return self.root / "state.db"

    @property
    def controller_file(self) -> Path:
        """JSON with the running controller's pid and url; rewritten on each start."""
        return self.root / "controller.json"

    @property
    def controller_lock(self) -> Path:
        return self.root / "controller.lock"

    @property
    def controller_log(self) -> Path:
        return self.root / "controller.log"

    def service_dir(self, service: str) -> Path:
        return self.root / "services" / service

    def version_dir(self, service: str, version: int) -> Path:
        return self.service_dir(service) / "versions" / str(version)

    def version_workdir(self, service: str, version: int) -> Path:
        return self.version_dir(service, version) / "workdir"

    def replica_log(self, service: str, replica_id: int) -> Path:
        return self.service_dir(service) / "replicas" / f"{replica_id}.log"

    def lb_log(self, service: str) -> Path:
        return self.service_dir(service) / "load_balancer.log"

    @property
    def sockets_dir(self) -> Path:
        """Unix sockets an isolated replica reaches by path (unix_socket.py); 0700."""
        return self.root / "sockets"

    @property
    def routes_socket(self) -> Path:
        """The controller's routes-only endpoint: route tables and wake, nothing else."""
        return self.sockets_dir / "routes.sock"

    def call_socket(self, service: str, replica_id: int) -> Path:
        """Where a Python replica's app server also listens, for handle calls from
        replicas in their own network namespace. Short (a Unix socket path is at
        most 107 bytes): a hash of the service's name and the replica's id."""
        digest = hashlib.sha256(service.encode()).hexdigest()[:12]
        return self.sockets_dir / f"{digest}-{replica_id}.sock"

    def read_controller_info(self) -> dict[str, Any] | None:
        """The recorded controller address, or None when none was ever started."""
        try:
            data = json.loads(self.controller_file.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def controller_url(self) -> str | None:
        info = self.read_controller_info()
        url = info.get("url") if info else None
        return url if isinstance(url, str) else None
