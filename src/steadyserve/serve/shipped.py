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
    import cloudpickle  # type: ignore[import-untyped]

    folder.mkdir(parents=True, exist_ok=True)

    class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]
        # A class attribute: the C pickler reads its table when it is constructed.
        dispatch_table: ClassVar[ChainMap[Any, Any]] = ChainMap(
            _reducers(), cloudpickle.Pickler.dispatch_table
        )

    out = io.BytesIO()
    _Pickler(out).dump(app)
    data = out.getvalue()
    for name, content in (
        (PICKLE_FILE, data),
        (META_FILE, json.dumps({**meta, "python": python_version()}, sort_keys=True).encode()),
    ):
        draft = folder / f".{name}.{os.getpid()}"
        draft.write_bytes(content)
        os.chmod(draft, 0o600)
        os.replace(draft, folder / name)


def _reducers() -> dict[type, Callable[[Any], tuple[Any, ...]]]:
    """Pickling for library objects that pickle but cannot be unpickled: Starlette's
    ``State`` (a FastAPI app's ``app.state``, reached from an ``@serve.ingress``
    class through its app) looks its attributes up in itself while it has none yet,
    for ever. Only for libraries the application already imported."""
    found: dict[type, Callable[[Any], tuple[Any, ...]]] = {}
    starlette = sys.modules.get("starlette.datastructures")
    state = getattr(starlette, "State", None)
    if isinstance(state, type):
        found[state] = lambda value: (state, (dict(value._state),))
    return found


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
