"""A name freed by ``steady down`` starts again at version 1, as in SkyServe.

The history a down kept (versions, events, logs) is forgotten when a new service
takes the name, with a note saying so: a new file under that name never becomes
a later version of the service that was down.
"""

from __future__ import annotations

import asyncio
import shutil

from steadyserve.home.paths import Home
from steadyserve.store import Store


async def free_name(store: Store, home: Home, name: str) -> list[str]:
    """Forget what a down of ``name`` kept; the notes to show (none if nothing was)."""
    versions = [v.version for v in store.versions(name)]
    if not versions:
        return []
    store.delete_service(name, purge=True)
    await asyncio.to_thread(shutil.rmtree, home.service_dir(name), ignore_errors=True)
    first, last = versions[0], versions[-1]
    shown = f"version {first}" if first == last else f"versions {first}-{last}"
    return [
        f"name: {name} was taken down earlier; its history ({shown}) is forgotten"
        " and this service starts at version 1"
    ]
