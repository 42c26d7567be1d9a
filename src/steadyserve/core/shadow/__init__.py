"""Shadow traffic as pure logic: comparing two answers to one request, and judging a
shadow step from the counts of such comparisons.

The load balancer (lb/mirror.py) mirrors a share of the requests to the new version,
parses both answers and calls :mod:`compare` here; it counts the differing JSON
paths it finds. The controller (controller/rollout/canary.py) adds those counts up
over every load-balancer worker and asks :mod:`verdict` whether the new version
passes, with the noise learned from pairs of stable answers taken out. Nothing here
does I/O or reads a clock.
"""
