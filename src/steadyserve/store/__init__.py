"""The store: one SQLite file per home holding services, versions (the full spec
text), replicas, updates and events (``database.py``), read and written as the typed
rows of ``rows.py``."""

from steadyserve.store.database import STRICT_MOVES_ENV, Store
from steadyserve.store.rows import EventRow, ReplicaRow, ServiceRow, UpdateRow, VersionRow

__all__ = [
    "STRICT_MOVES_ENV",
    "EventRow",
    "ReplicaRow",
    "ServiceRow",
    "Store",
    "UpdateRow",
    "VersionRow",
]
