"""The contract between the controller and wherever replicas run.

The controller decides; a backend only prepares a version, starts and stops
replica processes and says whether they still run. ``local`` runs them as
subprocesses; a Ray backend would run them as actors behind the same calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class ProvisionError(Exception):
    """A version could not be prepared (workdir copy or setup failed); one line."""


@dataclass(frozen=True)
class LaunchRequest:
    service: str
    version: int
    replica_id: int
    command: list[str]
    env: dict[str, str]
    workdir: Path
    log_path: Path


class ReplicaHandle(Protocol):
    @property
    def pid(self) -> int | None: ...

    @property
    def create_time(self) -> float | None: ...

    @property
    def port(self) -> int: ...

    def exit_code(self) -> int | None:
        """None while the replica runs, else its exit code (-N for signal N)."""


class Backend(Protocol):
    async def prepare(
        self,
        service: str,
        version: int,
        setup: str | None,
        env: dict[str, str],
        pip: list[str] | str | None = None,
    ) -> Path:
        """Make the version's workdir ready; return it. With ``setup`` or ``pip``
        the version gets its own environment (steadyserve/environments.py), which
        its replicas then run in."""

    async def launch(self, request: LaunchRequest) -> ReplicaHandle: ...

    def adopt(self, pid: int, create_time: float | None, port: int) -> ReplicaHandle | None:
        """Re-attach to a replica a previous controller started, if it still runs."""

    async def stop(self, handle: ReplicaHandle, timeout_s: float) -> None:
        """Ask the replica to exit, and make sure it has after ``timeout_s``."""
