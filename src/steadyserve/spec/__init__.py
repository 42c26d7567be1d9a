"""Service and fleet files -> typed, validated specs.

Everything a user writes goes through here once, and every other module trusts
the result: counts are ints, times are floats, the readiness probe is always an
object, ``replicas``/``replica_policy`` are resolved, ``workdir`` is absolute.
Fields that later features act on (canary, analysis, SkyPilot's resource keys)
are validated now too, so a file that loads today does not start failing when
the feature behind a field lands.

Bad input becomes one :class:`SpecError` whose text is a single line
``"{file}: {field.path}: {message}"``; it also carries every further mistake
pydantic found in the same file (:meth:`SpecError.lines`, one line each), so the
CLI prints them all at once and exits 2.
Pydantic does the structural work, but its messages ("Input should be ...",
URLs, several lines) never reach the user: our own validators raise plain
messages, and :func:`_convert` maps what pydantic itself reports.
"""

__all__ = [
    "MAX_FILE_BYTES",
    "NAME_PATTERN",
    "AutoscalingConfig",
    "CanaryAnalysis",
    "CanaryPolicy",
    "CanaryStep",
    "ReadinessProbe",
    "ReplicaPolicy",
    "Resources",
    "RollingUpdate",
    "ServiceSection",
    "ServiceSpec",
    "SpecError",
    "UpdateMode",
    "load_fleet_file",
    "load_service_file",
    "parse_service",
]

from steadyserve.core.states import UpdateMode
from steadyserve.spec.canary import CanaryAnalysis, CanaryPolicy, CanaryStep
from steadyserve.spec.errors import (
    MAX_FILE_BYTES,
    NAME_PATTERN,
    SpecError,
)
from steadyserve.spec.fleet import load_fleet_file
from steadyserve.spec.loading import load_service_file, parse_service
from steadyserve.spec.models import Resources, ServiceSpec
from steadyserve.spec.sections import (
    AutoscalingConfig,
    ReadinessProbe,
    ReplicaPolicy,
    RollingUpdate,
    ServiceSection,
)
