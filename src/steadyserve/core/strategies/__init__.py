"""Update strategies: one module per mode, each with its plan and counts, behind one
registry keyed by the update mode (as Kubernetes keeps ``rolling.go`` and
``recreate.go`` apart). The controller, the spec and the dry run ask the registry,
never test a mode's name. A new strategy is one new module and one line below."""

from steadyserve.core.strategies.base import (
    STRATEGIES,
    UpdateCounts,
    UpdateStep,
    UpdateStrategy,
    register,
    selectable_modes,
    strategy_of,
)
from steadyserve.core.strategies.blue_green import BlueGreen
from steadyserve.core.strategies.canary import Canary
from steadyserve.core.strategies.in_place import InPlace
from steadyserve.core.strategies.rolling import Rolling

__all__ = [
    "STRATEGIES",
    "UpdateCounts",
    "UpdateStep",
    "UpdateStrategy",
    "register",
    "selectable_modes",
    "strategy_of",
]

register(Rolling())
register(BlueGreen())
register(Canary())
register(InPlace())
