"""The contract between the controller and a replica process, in one place.

The controller builds a replica's environment from these names; the Python
runner (``steadyserve.replica.settings``) reads them with these defaults; the
orphan sweep and ``steady down`` find a replica's processes by its tag. Keeping
the names here means a variable the controller sets is one the runner reads.

A replica's environment is clean: the base variables below (copied from the
controller's environment when set), then the documented ``STEADY_*`` variables
and ``PORT``, then the service file's ``envs``. Nothing else of the controller's
environment (``STEADY_TOKEN`` above all) reaches a replica.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

# Set for every replica (command or Python).
PORT = "PORT"
HOST = "HOST"
"""The address to bind: ``127.0.0.1`` on the local backend, the node's address on
Ray (where the load balancer runs on another machine). Set by the backend."""
REPLICA_ID = "STEADY_REPLICA_ID"
SKYPILOT_REPLICA_ID = "SKYPILOT_SERVE_REPLICA_ID"
PYTHONUNBUFFERED = "PYTHONUNBUFFERED"
"""``1`` unless the file's ``envs`` set it: prints reach ``steady logs`` at once."""
SERVICE_NAME = "STEADY_SERVICE_NAME"
APP_NAME = "STEADY_APP_NAME"
"""The Ray Serve application a replica's service belongs to (its replica context)."""
SERVICE_VERSION = "STEADY_SERVICE_VERSION"
REPLICA_TAG = "STEADY_REPLICA_TAG"
"""``<home-id>/<service>/<replica-id>``: inherited by everything a replica starts,
``setsid`` and double forks included, so its whole tree can be found and stopped."""

# Set for Python replicas only: the runner's settings.
CONTROL_PORT = "STEADY_CONTROL_PORT"
CONTROL_SECRET = "STEADY_CONTROL_SECRET"
"""Read and removed from the environment by the runner before user code is
imported, so the user's code and its children never see it."""
MAX_ONGOING_REQUESTS = "STEADY_MAX_ONGOING_REQUESTS"
HEALTH_CHECK_TIMEOUT_S = "STEADY_HEALTH_CHECK_TIMEOUT_S"
GRACEFUL_SHUTDOWN_TIMEOUT_S = "STEADY_GRACEFUL_SHUTDOWN_TIMEOUT_S"
GRACEFUL_SHUTDOWN_WAIT_LOOP_S = "STEADY_GRACEFUL_SHUTDOWN_WAIT_LOOP_S"
USER_CONFIG = "STEADY_USER_CONFIG"
# Handles (steadyserve.serve): where the controller is, and the secret that lets
# replicas of one home send each other pickle (read and removed like CONTROL_SECRET).
CONTROLLER_FILE = "STEADY_CONTROLLER_FILE"
GRAPH_SECRET = "STEADY_GRAPH_SECRET"
ROUTES_TOKEN = "STEADY_ROUTES_TOKEN"
"""Lets handles read route tables (only): replicas never get the API's secret or STEADY_TOKEN."""
CALL_SOCKET = "STEADY_CALL_SOCKET"
"""A Unix socket path the runner's app server listens on too (local backend): how
replicas in their own network namespace call this one (docs/isolation.md)."""
ROUTES_SOCKET = "STEADY_ROUTES_SOCKET"
"""Set for a replica in its own network namespace only: the controller's routes-only
Unix socket. Its handles read route tables there and call other replicas at their
``CALL_SOCKET`` (the host's loopback is out of reach)."""
HANDLE_CALL_PATH = "/-/steady/call"
"""Where a Python replica takes handle calls; every load balancer refuses it."""

# The runner's defaults where neither the environment nor the decorator says.
DEFAULT_MAX_ONGOING_REQUESTS = 100
DEFAULT_HEALTH_CHECK_TIMEOUT_S = 30.0
DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_S = 20.0
DEFAULT_GRACEFUL_SHUTDOWN_WAIT_LOOP_S = 2.0

CONTROL_SECRET_HEADER = "X-Steady-Control-Secret"

SETUP_MARKER = ".steady-setup-done"
"""In a version's directory once its ``setup`` succeeded (setup runs once per version)."""

BASE_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "TERM",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",
)
"""Copied from the controller's environment when set: what programs need to run."""
BASE_ENV_PREFIXES = ("LC_",)

# The GPUs a replica was given (controller/capacity.py), as Ray and Kubernetes'
# device plugin name them: indices in nvidia-smi's order, which CUDA follows
# when CUDA_DEVICE_ORDER is PCI_BUS_ID (set unless the file's envs set it).
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
NVIDIA_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
CUDA_DEVICE_ORDER = "CUDA_DEVICE_ORDER"

_KEY_FILE = "control.key"
_KEY_BYTES = 32


def base_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed part of ``environ`` that every replica starts from."""
    return {
        name: value
        for name, value in environ.items()
        if name in BASE_ENV or name.startswith(BASE_ENV_PREFIXES)
    }


def home_id(home_root: Path | str) -> str:
    """A short, slash-free name for a STEADY_HOME, the first part of every tag."""
    return hashlib.sha256(str(home_root).encode()).hexdigest()[:16]


def replica_tag(home_root: Path | str, service: str, replica_id: int) -> str:
    return f"{home_id(home_root)}/{service}/{replica_id}"


def tag_of_home(tag: str, home_root: Path | str) -> bool:
    return tag.startswith(home_id(home_root) + "/")


def control_secret(home_root: Path, service: str, replica_id: int, launched_at: float) -> str:
    """The secret a Python replica's control port requires.

    Derived from a key only the controller reads (``control.key`` in the home,
    mode 0600) and the replica's identity, so a restarted controller recomputes
    it for the replicas it re-adopts without storing one secret per replica.
    """
    key = _home_key(home_root)
    message = f"{service}/{replica_id}/{launched_at!r}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def graph_secret(home_root: Path) -> str:
    """The secret every Python replica of this home gets: handle calls carrying it
    may send pickle (docs/ray-serve-api.md)."""
    return hmac.new(_home_key(home_root), b"graph-pickle", hashlib.sha256).hexdigest()


def api_secret(home_root: Path) -> str:
    """The bearer token the controller's API requires when STEADY_TOKEN is not set.

    Only who can read ``control.key`` (the home's owner: mode 0600 in a 0700 home)
    can derive it, so the owner's commands need no token and other local users
    have none (docs/security.md). Never given to a replica."""
    return hmac.new(_home_key(home_root), b"api", hashlib.sha256).hexdigest()


def routes_token(home_root: Path) -> str:
    """The bearer token that reads ``GET /api/v1/lb/NAME/routes`` and nothing else."""
    return hmac.new(_home_key(home_root), b"routes-read", hashlib.sha256).hexdigest()


@lru_cache(maxsize=64)
def _home_key(home_root: Path) -> bytes:
    """The home's key, made on first use. The CLI and the controller may both be
    first: the key is written to a private file and linked into place, so every
    process reads the one key that won and none reads a half-written file."""
    path = home_root / _KEY_FILE
    try:
        return _parse_key(path.read_text())
    except FileNotFoundError:
        unreadable = False
    except ValueError:  # not a key (a crash mid-write by an older version): replace it
        unreadable = True
    draft = home_root / f".{_KEY_FILE}.{secrets.token_hex(8)}"
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(_KEY_BYTES))
        if unreadable:
            os.replace(draft, path)
        else:
            with contextlib.suppress(FileExistsError):
                os.link(draft, path)
    finally:
        draft.unlink(missing_ok=True)
    return _parse_key(path.read_text())


def _parse_key(text: str) -> bytes:
    """32 bytes in hex; anything else (an empty file above all) is no key."""
    key = bytes.fromhex(text.strip())
    if len(key) != _KEY_BYTES:
        raise ValueError(f"{_KEY_FILE} does not hold {_KEY_BYTES} bytes")
    return key
