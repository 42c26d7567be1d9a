"""Autoscaling, pure: no I/O, no clock of its own (every function takes ``now``).

- :mod:`.signals`: load samples from the load balancers and a time-bounded window.
- :mod:`.policies`: SkyServe's request-rate policy and Ray Serve's ongoing-requests
  policy, with the anchors' field names and defaults.
- :mod:`.decide`: one step, ``decide(policy, state, window, now, current_replicas)``,
  burst mode, and the scale-from-zero answer for a request waiting at zero.
- :mod:`.victims`: which replicas to stop when scaling down.

The controller owns the loop: it feeds samples into a :class:`LoadWindow`
(``span=policy.window_s``), calls :func:`decide` each tick, stores the returned
state, records ``decision.reason`` as an event when ``decision.changed``, and
stops :func:`choose_victims` replicas when the target drops. A request that
arrives while nothing serves calls :func:`request_waiting_at_zero`.

Times are plain floats from whatever clock the caller reads. A state that is
stored and read back after a restart needs a clock that survives restarts
(wall-clock seconds), not ``time.monotonic()``.
"""

from steadyserve.core.autoscale.decide import (
    Decision,
    ScaleState,
    decide,
    initial_state,
    request_waiting_at_zero,
)
from steadyserve.core.autoscale.policies import (
    FixedPolicy,
    OngoingPolicy,
    Policy,
    QpsPolicy,
    ongoing_desired,
    qps_desired,
)
from steadyserve.core.autoscale.signals import (
    LoadSample,
    LoadWindow,
    ReplicaLoad,
    mean_ongoing,
    qps,
)
from steadyserve.core.autoscale.victims import Candidate, choose_victims

__all__ = [
    "Candidate",
    "Decision",
    "FixedPolicy",
    "LoadSample",
    "LoadWindow",
    "OngoingPolicy",
    "Policy",
    "QpsPolicy",
    "ReplicaLoad",
    "ScaleState",
    "choose_victims",
    "decide",
    "initial_state",
    "mean_ongoing",
    "ongoing_desired",
    "qps",
    "qps_desired",
    "request_waiting_at_zero",
]
