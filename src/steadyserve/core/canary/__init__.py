"""Progressive delivery as pure logic: the canary's step machine, its analysis and
the load balancer's weighted choice between version pools.

Nothing here does I/O or reads a clock: the controller (controller/rollout/canary.py)
and the load balancer (lb/balancer.py) feed in times, counts and commands and
carry out what these modules decide, so the tests walk every case with
simulated time.
"""
