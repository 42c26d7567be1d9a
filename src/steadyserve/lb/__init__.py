"""SteadyServe's load balancer: one process per service, the product's hot path.

Run it as ``python -m steadyserve.lb --service NAME --port PORT --home PATH``.

- ``policies``: routing policies (pure: least_load, round_robin, power_of_two).
- ``routes``: the immutable route table, the controller long-poll and load reports.
- ``balancer``: per-replica counts, pooled connections, ejection; no I/O of its own.
- ``client`` / ``proxy`` / ``upstream``: the data path, plain asyncio protocols on
  uvloop with httptools on both sides and keep-alive pools towards the replicas.
- ``server`` / ``__main__``: wiring, signals and graceful drain.
"""
