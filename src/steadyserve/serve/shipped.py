"""An application shipped by value: what ``serve.run`` writes, what replicas load.

Ray's users define deployments inside functions and in ``__main__``, which no
replica could import by path, so ``serve.run`` pickles the whole bound graph
with cloudpickle into ``app.pkl`` in a folder of its own, the services'
workdir (each version's snapshot keeps its own copy, so a rollback runs the
graph it had). Replicas name ``steadyserve.serve.shipped:app.<Deployment>``:
this module's ``app`` attribute is the unpickled graph, and the runner's graph
code picks the node as for any import path.

Pickles are only portable within one Python minor version (bytecode changes),
so ``app.json`` records the driver's, and a replica on another refuses in one
line instead of failing somewhere inside the unpickler.
"""

from __future__ import annotations

import io
import json
import os
import sys
import threading
from collections import ChainMap
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from steadyserve.serve.errors import LoadError

PICKLE_FILE = "app.pkl"
META_FILE = "app.json"
MODULE = "steadyserve.serve.shipped"
APP_ATTR = "app"

_loaded: dict[str, Any] = {}


def python_version() -> str:
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def write(app: Any, folder: Path, meta: dict[str, Any]) -> None:
    """Pickle ``app`` into ``folder`` (replacing what was there, atomically)."""
    folder.mkdir(parents=True, exist_ok=True)
    data = dumps(app)
    for name, content in (
        (PICKLE_FILE, data),
        (META_FILE, json.dumps({**meta, "python": python_version()}, sort_keys=True).encode()),
    ):
        draft = folder / f".{name}.{os.getpid()}"
        draft.write_bytes(content)
        os.chmod(draft, 0o600)
        os.replace(draft, folder / name)


def dumps(obj: Any) -> bytes:
    """``obj`` pickled by value as an application is shipped (cloudpickle, and the
    reducers below for what would not pickle or unpickle as it is)."""
    import cloudpickle  # type: ignore[import-untyped]

    class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]
        # A class attribute: the C pickler reads its table when it is constructed.
        dispatch_table: ClassVar[ChainMap[Any, Any]] = ChainMap(
            _reducers(), cloudpickle.Pickler.dispatch_table
        )

    out = io.BytesIO()
    _Pickler(out).dump(obj)
    return out.getvalue()


def loads(data: bytes) -> Any:
    import cloudpickle

    return cloudpickle.loads(data)


def _reducers() -> dict[type, Callable[[Any], tuple[Any, ...]]]:
    """Pickling for objects that do not pickle as they are: threading locks (rebuilt
    fresh), and Starlette's ``State`` (a FastAPI app's ``app.state``, reached from
    an ``@serve.ingress`` class through its app), which pickles but cannot be
    unpickled: it looks its attributes up in itself while it has none yet, for
    ever (only when the application imported Starlette)."""
    found: dict[type, Callable[[Any], tuple[Any, ...]]] = {}
    # FastAPI 0.137 and later keep a threading.Lock in each included router (a
    # cache's). A lock carries nothing to ship, and the app is shipped before it
    # serves: it arrives as a fresh, unlocked one (as Ray 2.60's serve.ingress does).
    found[type(threading.Lock())] = _fresh_lock
    found[type(threading.RLock())] = _fresh_rlock
    starlette = sys.modules.get("starlette.datastructures")
    state = getattr(starlette, "State", None)
    if isinstance(state, type):
        found[state] = lambda value: (state, (dict(value._state),))
    return found


def _fresh_lock(_lock: Any) -> tuple[Any, ...]:
    return (threading.Lock, ())


def _fresh_rlock(_lock: Any) -> tuple[Any, ...]:
    return (threading.RLock, ())


def check_python(meta: dict[str, Any], here: str | None = None) -> None:
    """LoadError when the pickle was made by another Python minor version."""
    made_by = meta.get("python")
    running = here or python_version()
    if made_by != running:
        raise LoadError(
            f"the application was pickled by Python {made_by} but this replica runs "
            f"Python {running}: run the controller (steady up) with Python {made_by}"
        )


def load(folder: Path) -> Any:
    """The application pickled in ``folder``; LoadError with one line on any problem."""
    try:
        meta = json.loads((folder / META_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise LoadError(f"no shipped application in {folder} ({exc})") from None
    check_python(meta if isinstance(meta, dict) else {})
    import cloudpickle  # type: ignore[import-untyped]

    try:
        return cloudpickle.loads((folder / PICKLE_FILE).read_bytes())
    except Exception as exc:  # a class the pickle names by module cannot be imported here
        raise LoadError(f"cannot unpickle the application ({type(exc).__name__}: {exc})") from None


def __getattr__(name: str) -> Any:
    """``app``: the application in the replica's workdir (its cwd), loaded once."""
    if name != APP_ATTR:
        raise AttributeError(name)
    folder = os.getcwd()
    if folder not in _loaded:
        _loaded[folder] = load(Path(folder))
    return _loaded[folder]
