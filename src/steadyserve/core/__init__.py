"""The pure core: what to do, decided without I/O or a clock of its own.

- :mod:`.states`: the service, replica and version states and their typed tables of moves.
- :mod:`.changes`: a change between two specs, field by field: in place or restart.
- :mod:`.planner`: what to launch, drain and route, and the service's status.
- :mod:`.autoscale`: SkyServe's and Ray Serve's autoscaling decisions.
- :mod:`.canary`: the canary's step machine, its analysis and the weighted choice.

The controller and the load balancer carry out what these modules decide, so the
tests walk every case on simulated time.
"""
