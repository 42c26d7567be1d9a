"""The deterministic simulator of the control plane (docs/testing.md, "The simulator").

One seeded run is the real controller code (the runtime, planner, update strategies,
canary, autoscaler, probes, draining, SQLite state, route publishing) on a simulated
clock and backend, with a simulated load balancer that follows the published route
table through the real balancer and simulated clients that send requests on every
step. A schedule drawn from the seed adds updates, faults, controller kills and load
balancer restarts; invariants are checked after every step, and a violation prints
the seed and a shrunk schedule that replays it. ``python -m steadyserve.sim`` runs it.
"""
