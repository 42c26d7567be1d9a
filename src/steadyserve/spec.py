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

from __future__ import annotations

import difflib
import json
import math
import re
import stat
import types
import typing
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

__all__ = [
    "MAX_FILE_BYTES",
    "NAME_PATTERN",
    "AutoscalingConfig",
    "CanaryAnalysis",
    "CanaryPolicy",
    "CanaryStep",
    "LoadBalancingPolicy",
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

NAME_PATTERN = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?$")
"""Service names: they appear in URLs, file paths and process titles, so keep them plain."""

MAX_FILE_BYTES = 1 << 20
"""A service file is a few hundred bytes; anything past 1 MiB is a wrong path, not a spec."""

TOP_LEVEL = "(top level)"

UpdateMode = Literal["rolling", "blue_green", "canary"]
LoadBalancingPolicy = Literal["least_load", "round_robin", "power_of_two"]

_NAME_RULE = (
    "use 1-63 lowercase letters, digits, '-' or '_', starting and ending with a letter or digit"
)


# --------------------------------------------------------------------------- errors


class SpecError(ValueError):
    """A user mistake in a service or fleet file, phrased for the user.

    ``str()`` is always one line, ``"{file}: {path}: {message}"`` with the parts
    that are known, so the CLI can print it without a traceback. ``path`` is the
    dotted field path (``service.replicas``, ``services[1].run``), ``(top level)``
    for the whole document, or None for problems with the file itself.
    """

    def __init__(
        self,
        path: str | None,
        message: str,
        *,
        file: str | None = None,
        more: Sequence[tuple[str | None, str]] = (),
    ) -> None:
        self.path = path
        self.message = message
        self.file = file
        self.more = tuple(more)
        """Further mistakes of the same file, (path, message) each: ``str()`` stays
        the first one, :meth:`lines` has them all."""
        super().__init__(str(self))

    def lines(self) -> list[str]:
        """Every mistake found, one line each, ``"{file}: {path}: {message}"``."""
        rest = [str(SpecError(path, message, file=self.file)) for path, message in self.more]
        return [str(self), *rest]

    def all(self) -> list[tuple[str | None, str]]:
        return [(self.path, self.message), *self.more]

    @staticmethod
    def combine(errors: Sequence[SpecError], file: str | None = None) -> SpecError:
        """One error carrying every mistake of ``errors`` (in order, duplicates once)."""
        found: list[tuple[str | None, str]] = []
        for error in errors:
            found.extend(item for item in error.all() if item not in found)
        (path, message), *more = found
        return SpecError(path, message, file=file, more=more)

    def __str__(self) -> str:
        parts = [p for p in (self.file, self.path) if p]
        return " ".join(": ".join([*parts, self.message]).splitlines())

    def __reduce__(self) -> tuple[Any, ...]:
        # Exceptions pickle through self.args by default, which does not match __init__.
        return (
            SpecError,
            (self.path, self.message),
            {"file": self.file, "more": self.more},
        )

    def in_file(self, file: str) -> SpecError:
        """The same error, prefixed with the file it came from."""
        return SpecError(self.path, self.message, file=file, more=self.more)

    def under(self, prefix: str) -> SpecError:
        """The same error for a document nested at ``prefix`` (a fleet file's item)."""

        def nested(path: str | None) -> str:
            return prefix if path in (None, TOP_LEVEL) else f"{prefix}.{path}"

        more = [(nested(path), message) for path, message in self.more]
        return SpecError(nested(self.path), self.message, file=self.file, more=more)


def _fail(message: str, **context: object) -> PydanticCustomError:
    """An error pydantic reports with our message verbatim (``{x}`` filled from context)."""
    return PydanticCustomError("spec", message, context or None)


# ------------------------------------------------------------------ value checkers
# Each checker validates completely and raises a plain message, so pydantic's own
# (lax, wordy) checks behind it never fail. Counts reject bools and fractions, and
# strings: a quoted "2" in YAML is more likely a mistake than an intent.


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value: object) -> float | None:
    """The value as a finite float, or None (bools, strings, inf/nan, 10**400)."""
    if not _is_number(value):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _integer(*, ge: int, le: int | None = None) -> Callable[[object], int]:
    message = (
        f"must be an integer >= {ge}" if le is None else f"must be an integer from {ge} to {le}"
    )

    def check(value: object) -> int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if (
            not isinstance(value, int)
            or isinstance(value, bool)
            or value < ge
            or (le is not None and value > le)
        ):
            raise _fail(message)
        return value

    return check


def _number(
    *, gt: float | None = None, ge: float | None = None, le: float | None = None
) -> Callable[[object], float]:
    if le is not None:
        message = f"must be a number from {ge:g} to {le:g}"
    elif gt is not None:
        message = f"must be a number > {gt:g}"
    else:
        message = f"must be a number >= {ge:g}"

    def check(value: object) -> float:
        number = _finite(value)
        if (
            number is None
            or (gt is not None and number <= gt)
            or (ge is not None and number < ge)
            or (le is not None and number > le)
        ):
            raise _fail(message)
        return number

    return check


def _choice(kind: Any) -> Callable[[object], str]:
    options: tuple[str, ...] = typing.get_args(kind)
    message = "must be one of " + ", ".join(options)

    def check(value: object) -> str:
        if not isinstance(value, str) or value not in options:
            raise _fail(message)
        return value

    return check


def _url_path(value: object) -> str:
    if (
        not isinstance(value, str)
        or not value.startswith("/")
        or re.search(r"[\s\x00-\x1f]", value)
    ):
        raise _fail("must be a URL path starting with /")
    return value


def _no_nul(value: str) -> str:
    """Strings that become a process's argv, environment or paths cannot hold NUL."""
    if "\x00" in value:
        raise _fail("must not contain a NUL byte (\\0)")
    return value


def _command(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail("must be a non-empty command")
    return _no_nul(value)


def _non_empty_text(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail("must be a non-empty string")
    return _no_nul(value)


def _optional_text(value: object) -> str:
    if not isinstance(value, str):
        raise _fail("must be a string")
    return _no_nul(value)


_IMPORT_PATH = re.compile(
    r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$", re.ASCII
)


def _import_path(value: object) -> str:
    if not isinstance(value, str) or not _IMPORT_PATH.fullmatch(value):
        raise _fail("must look like module.sub:attr")
    return value


def _service_name(value: object) -> str:
    if not isinstance(value, str):
        raise _fail("must be a string")
    if not NAME_PATTERN.fullmatch(value):
        raise _fail("{got} is not a valid service name: " + _NAME_RULE, got=_short_repr(value))
    return value


def _short_repr(value: str, limit: int = 70) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def _env_name(value: object) -> str:
    if not isinstance(value, str) or not _ENV_NAME.fullmatch(value):
        raise _fail(
            "not a valid environment variable name (letters, digits and _, no leading digit)"
        )
    return value


def _header_name(value: object) -> str:
    if not isinstance(value, str) or not _HEADER_NAME.fullmatch(value):
        raise _fail("not a valid HTTP header name")
    return value


def _scalar_text(value: object) -> str:
    """Env values and headers are strings on the wire; YAML makes ``2`` an int and
    ``true`` a bool, so those are written back the way YAML/JSON spell them. None is
    refused: it is almost always an unfinished ``KEY:`` line, not an intent."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _no_nul(value)
    if _is_number(value):
        return str(value)
    raise _fail('must be a string, number or boolean (null is not allowed; use "" for empty)')


def _json_data(value: object) -> object:
    """Values stored as-is and sent as JSON (user_config, post_data, ignored extras)
    must survive a JSON round trip unchanged, or the stored spec would differ from
    what the user wrote. YAML can also produce dates, sets and bytes; refuse those."""
    problem = _json_problem(value, depth=0)
    if problem:
        raise _fail("must be JSON data: " + problem)
    return value


def _json_problem(value: object, depth: int) -> str | None:
    if depth > 64:
        return "nested too deeply"
    if value is None or isinstance(value, (str, bool, int)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else "numbers must be finite"
    if isinstance(value, list):
        for item in value:
            problem = _json_problem(item, depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return "mapping keys must be strings"
            problem = _json_problem(item, depth + 1)
            if problem:
                return problem
        return None
    return f"a {type(value).__name__} value is not JSON"


def _json_mapping(value: object) -> object:
    if not isinstance(value, dict):
        raise _fail("must be a mapping")
    return _json_data(value)


def _string_or_json_mapping(value: object) -> object:
    if isinstance(value, str):
        return value
    if not isinstance(value, dict):
        raise _fail("must be a string or a mapping")
    return _json_data(value)


# Resources: accepted in SkyPilot's spellings so SkyServe task files run unchanged.
_CPUS = re.compile(r"^(\d+(?:\.\d+)?)\+?$")
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)\s*(kb|mb|gb|tb|pb)?\+?$", re.IGNORECASE)
_DISK = re.compile(r"^(\d+)\s*(kb|mb|gb|tb|pb)?$", re.IGNORECASE)
_ACCELERATOR = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)(?::(\d+(?:\.\d+)?))?$")
_PORT_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_MEMORY_UNITS_GB = {"kb": 1 / (1 << 20), "mb": 1 / 1024, "gb": 1.0, "tb": 1024.0, "pb": 1024.0**2}


def _amount(pattern: re.Pattern[str], message: str) -> Callable[[object], int | float | str]:
    def check(value: object) -> int | float | str:
        number = _finite(value)
        if number is not None and number > 0:
            return value  # type: ignore[return-value]
        if isinstance(value, str):
            match = pattern.fullmatch(value.strip())
            if match and float(match.group(1)) > 0:
                return value
        raise _fail(message)

    return check


_ACCELERATOR_MESSAGE = (
    'must be like "T4:1", a mapping like {T4: 1}, or a list like ["L4:1", "A10G:1"]'
)


def _accelerators(value: object) -> str | list[str] | dict[str, float | int | None]:
    """SkyPilot accepts ``T4:1``, ``{T4: 1}``, an ordered list of alternatives, and a
    flow set ``{L4:1, A10G:1}`` (which YAML reads as a mapping with null values)."""
    if isinstance(value, str) and _accelerator_count_ok(value):
        return value
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, str) and _accelerator_count_ok(v) for v in value)
    ):
        return value
    if isinstance(value, dict) and value:
        for key, count in value.items():
            if not isinstance(key, str) or not _ACCELERATOR.fullmatch(key):
                break
            if count is None:
                if not _accelerator_count_ok(key):
                    break
            elif ":" in key or (_finite(count) or 0) <= 0:
                break
        else:
            return value
    raise _fail(_ACCELERATOR_MESSAGE)


def _accelerator_count_ok(text: str) -> bool:
    match = _ACCELERATOR.fullmatch(text)
    return bool(match) and (match.group(2) is None or float(match.group(2)) > 0)  # type: ignore[union-attr]


def _ports(value: object) -> int | str | list[int | str]:
    message = "must be a port, a range like 10052-10100, or a list of them"
    items = value if isinstance(value, list) else [value]
    if not items:
        raise _fail(message)
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool) and 1 <= item <= 65535:
            continue
        match = _PORT_RANGE.fullmatch(item) if isinstance(item, str) else None
        if match and 1 <= int(match.group(1)) <= int(match.group(2) or match.group(1)) <= 65535:
            continue
        raise _fail(message)
    return value  # type: ignore[return-value]


def _one_node(value: object) -> int:
    if value != 1 or isinstance(value, bool):
        raise _fail("must be 1 (each replica runs on a single node)")
    return 1


def _image_id(value: object) -> str | dict[str, str]:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        return value
    raise _fail("must be a string or a mapping of region to image id")


def _surge(*, cap_percent: int | None) -> Callable[[object], int | str]:
    """Kubernetes' intOrString: an absolute count, or a percent of the target."""
    if cap_percent is None:
        message = 'must be an integer >= 0 or a percentage like "25%"'
    else:
        message = 'must be an integer >= 0 or a percentage from "0%" to "100%"'

    def check(value: object) -> int | str:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        if (
            isinstance(value, str)
            and re.fullmatch(r"\d+%", value, re.ASCII)
            and (cap_percent is None or int(value[:-1]) <= cap_percent)
        ):
            return value
        raise _fail(message)

    return check


NonNegativeInt = Annotated[int, BeforeValidator(_integer(ge=0))]
PositiveInt = Annotated[int, BeforeValidator(_integer(ge=1))]
QueueLimit = Annotated[int, BeforeValidator(_integer(ge=-1))]
Weight = Annotated[int, BeforeValidator(_integer(ge=0, le=100))]
PortNumber = Annotated[int, BeforeValidator(_integer(ge=1, le=65535))]
Seconds = Annotated[float, BeforeValidator(_number(ge=0))]
PositiveSeconds = Annotated[float, BeforeValidator(_number(gt=0))]
PositiveNumber = Annotated[float, BeforeValidator(_number(gt=0))]
Fraction = Annotated[float, BeforeValidator(_number(ge=0, le=1))]
UrlPath = Annotated[str, BeforeValidator(_url_path)]
Command = Annotated[str, BeforeValidator(_command)]
NonEmptyText = Annotated[str, BeforeValidator(_non_empty_text)]
Text = Annotated[str, BeforeValidator(_optional_text)]
ImportPath = Annotated[str, BeforeValidator(_import_path)]
ServiceName = Annotated[str, BeforeValidator(_service_name)]
EnvName = Annotated[str, BeforeValidator(_env_name)]
HeaderName = Annotated[str, BeforeValidator(_header_name)]
ScalarText = Annotated[str, BeforeValidator(_scalar_text)]
JsonData = Annotated[Any, BeforeValidator(_json_data)]
UpdateModeField = Annotated[UpdateMode, BeforeValidator(_choice(UpdateMode))]
LoadBalancingPolicyField = Annotated[
    LoadBalancingPolicy, BeforeValidator(_choice(LoadBalancingPolicy))
]
Surge = Annotated[int | str, BeforeValidator(_surge(cap_percent=None))]
Unavailable = Annotated[int | str, BeforeValidator(_surge(cap_percent=100))]
CpuAmount = Annotated[
    int | float | str,
    BeforeValidator(
        _amount(_CPUS, 'must be a positive number of CPUs, optionally with + (like 2 or "4+")')
    ),
]
MemoryAmount = Annotated[
    int | float | str,
    BeforeValidator(
        _amount(
            _MEMORY,
            'must be a positive size in GB, optionally with a unit or + (like 4, "4+", "512MB")',
        )
    ),
]
DiskAmount = Annotated[
    int | float | str,
    BeforeValidator(
        _amount(_DISK, 'must be a positive size in GB, optionally with a unit (like 256, "256GB")')
    ),
]
Accelerators = Annotated[
    str | list[str] | dict[str, int | float | None], BeforeValidator(_accelerators)
]
Ports = Annotated[int | str | list[int | str], BeforeValidator(_ports)]
ImageId = Annotated[str | dict[str, str], BeforeValidator(_image_id)]
JsonMapping = Annotated[dict[str, Any], BeforeValidator(_json_mapping)]
StringOrJsonMapping = Annotated[str | dict[str, Any], BeforeValidator(_string_or_json_mapping)]
NumNodes = Annotated[int, BeforeValidator(_one_node)]


# -------------------------------------------------------------------------- models


class _Model(BaseModel):
    """Base of every spec model.

    Unknown fields are errors (a typo must not silently mean "default"); models are
    frozen because a spec is a value stored per version and compared, never edited
    (use ``model_copy(update=...)``); defaults are validated so they are stored in
    the same normal form as user input (``600`` -> ``600.0``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    @model_validator(mode="before")
    @classmethod
    def _plain_keys_and_null_sections(cls, data: Any) -> Any:
        """Field names must be strings, and ``section:`` left empty in YAML (null)
        means that section's defaults: it is what commenting out its lines leaves."""
        if not isinstance(data, dict):
            return data
        for key in data:
            if not isinstance(key, str):
                raise _fail("field names must be strings (got {got})", got=repr(key)[:40])
        fields = cls.model_fields
        return {
            key: value
            for key, value in data.items()
            if not (value is None and key in fields and fields[key].default_factory is not None)
        }


class ReadinessProbe(_Model):
    """How the controller decides a replica may receive traffic (SkyServe's probe)."""

    path: UrlPath = "/"
    initial_delay_seconds: Seconds = 1200.0
    """Probe failures before this much time after launch do not count (model loading)."""
    timeout_seconds: PositiveSeconds = 15.0
    post_data: JsonData = None
    """When set, the probe is a POST of this JSON (model servers often need a real request)."""
    headers: dict[HeaderName, ScalarText] = Field(default_factory=dict)


_QPS_FIELDS = ("target_qps_per_replica", "upscale_delay_seconds", "downscale_delay_seconds")
"""SkyServe's policy: request rate per replica over a 60 s window."""
_ONGOING_FIELDS = (
    "target_ongoing_requests",
    "look_back_period_s",
    "upscale_delay_s",
    "downscale_delay_s",
    "downscale_to_zero_delay_s",
    "upscaling_factor",
    "downscaling_factor",
    "initial_replicas",
)
"""Ray Serve's policy: ongoing requests per replica, averaged over a look-back period."""
_TARGETS = (_QPS_FIELDS[0], _ONGOING_FIELDS[0])


def _initial_within_bounds(policy: ReplicaPolicy | AutoscalingConfig) -> None:
    """A rule shared by ``replica_policy`` and ``autoscaling_config`` (after the fields)."""
    initial = policy.initial_replicas
    if initial is not None and not policy.min_replicas <= initial <= policy.max_replicas:
        raise _fail("initial_replicas must be between min_replicas and max_replicas")


class ReplicaPolicy(_Model):
    """Autoscaling bounds plus one target: SkyServe's request rate or Ray Serve's load.

    Only ``min_replicas`` means a fixed size (``max_replicas`` is filled in equal to
    it), as in SkyServe's ``replica_policy``. A target needs an
    explicit ``max_replicas``, and each policy's tuning fields go with its own
    target only: a field that would be ignored is an error instead.
    """

    min_replicas: NonNegativeInt
    max_replicas: NonNegativeInt
    target_qps_per_replica: PositiveNumber | None = None
    upscale_delay_seconds: Seconds = 300.0
    downscale_delay_seconds: Seconds = 1200.0
    target_ongoing_requests: PositiveNumber | None = None
    look_back_period_s: PositiveSeconds = 30.0
    upscale_delay_s: Seconds = 30.0
    downscale_delay_s: Seconds = 600.0
    downscale_to_zero_delay_s: Seconds | None = None
    """The 1 -> 0 step of Ray's policy; None means ``downscale_delay_s``."""
    upscaling_factor: PositiveNumber | None = None
    """Ray's gain on upscaling steps; None means 1."""
    downscaling_factor: PositiveNumber | None = None
    initial_replicas: NonNegativeInt | None = None
    """Ray's count at deploy time; None means ``min_replicas``."""

    @model_validator(mode="before")
    @classmethod
    def _max_defaults_to_min(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("max_replicas") is None and "min_replicas" in data:
            # A bad target value, or both targets at once, is reported as such after.
            given = [t for t in _TARGETS if t in data and (_finite(data[t]) or 0) > 0]
            if len(given) == 1:
                raise _fail(f"{given[0]} needs max_replicas (the most replicas to scale up to)")
            return {**data, "max_replicas": data["min_replicas"]}
        return data

    @field_validator("max_replicas")
    @classmethod
    def _max_not_below_min(cls, value: int, info: ValidationInfo) -> int:
        low = info.data.get("min_replicas")
        if low is not None and value < low:
            raise _fail("must be an integer >= min_replicas")
        return value

    @model_validator(mode="after")
    def _one_target(self) -> ReplicaPolicy:
        if self.target_qps_per_replica is not None and self.target_ongoing_requests is not None:
            raise _fail(
                "target_qps_per_replica and target_ongoing_requests are mutually exclusive"
                " (pick SkyServe's or Ray Serve's autoscaling policy)"
            )
        target = self.autoscaling_target
        own = {"qps": _QPS_FIELDS, "ongoing_requests": _ONGOING_FIELDS, None: ()}[target]
        # Stored specs list every field with its default, so only a value that
        # differs from the default (one that would change something) is judged.
        for name in (*_QPS_FIELDS, *_ONGOING_FIELDS):
            if name in own or getattr(self, name) == type(self).model_fields[name].default:
                continue
            policy = "SkyServe's" if name in _QPS_FIELDS else "Ray Serve's"
            needs = _QPS_FIELDS[0] if name in _QPS_FIELDS else _ONGOING_FIELDS[0]
            raise _fail(f"{name} is {policy} autoscaling field and needs {needs}")
        if self.max_replicas > self.min_replicas and target is None:
            raise _fail(
                "max_replicas > min_replicas needs an autoscaling target:"
                " target_qps_per_replica or target_ongoing_requests"
            )
        _initial_within_bounds(self)
        return self

    @property
    def autoscaling_target(self) -> Literal["qps", "ongoing_requests"] | None:
        """Which policy drives scaling, or None for a fixed size."""
        if self.target_qps_per_replica is not None:
            return "qps"
        if self.target_ongoing_requests is not None:
            return "ongoing_requests"
        return None


class AutoscalingConfig(_Model):
    """Ray Serve's ``autoscaling_config``, with Ray's field names and defaults.

    Accepted under ``service:`` as a synonym of ``replica_policy`` and stored as
    one (with ``target_ongoing_requests``), so the rest of SteadyServe sees one shape.
    """

    min_replicas: NonNegativeInt = 1
    initial_replicas: NonNegativeInt | None = None
    max_replicas: PositiveInt = 1
    target_ongoing_requests: PositiveNumber = 2.0
    look_back_period_s: PositiveSeconds = 30.0
    upscale_delay_s: Seconds = 30.0
    downscale_delay_s: Seconds = 600.0
    downscale_to_zero_delay_s: Seconds | None = None
    upscaling_factor: PositiveNumber | None = None
    downscaling_factor: PositiveNumber | None = None

    @model_validator(mode="before")
    @classmethod
    def _target_needs_max(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and (_finite(data.get("target_ongoing_requests")) or 0) > 0
            and data.get("max_replicas") is None
        ):
            raise _fail(
                "target_ongoing_requests needs max_replicas (the most replicas to scale up to)"
            )
        return data

    @field_validator("max_replicas")
    @classmethod
    def _max_not_below_min(cls, value: int, info: ValidationInfo) -> int:
        low = info.data.get("min_replicas")
        if low is not None and value < low:
            raise _fail("must be an integer >= min_replicas")
        return value

    @model_validator(mode="after")
    def _coherent(self) -> AutoscalingConfig:
        _initial_within_bounds(self)
        return self

    def as_replica_policy(self) -> ReplicaPolicy:
        return ReplicaPolicy.model_validate(self.model_dump())


class RollingUpdate(_Model):
    """Kubernetes' surge/unavailable pair; the defaults never lose ready capacity."""

    max_surge: Surge = "100%"
    max_unavailable: Unavailable = 0

    @model_validator(mode="after")
    def _can_progress(self) -> RollingUpdate:
        if _is_zero(self.max_surge) and _is_zero(self.max_unavailable):
            raise _fail(
                "max_surge and max_unavailable cannot both be 0 (an update could never progress)"
            )
        return self


def _is_zero(value: int | str) -> bool:
    return value in (0, "0%") or (isinstance(value, str) and int(value[:-1]) == 0)


def _resolve_percent(value: int | str, target: int, *, round_up: bool) -> int:
    if isinstance(value, int):
        return value
    scaled = int(value[:-1]) * target
    return -(-scaled // 100) if round_up else scaled // 100


class CanaryStep(_Model):
    """One step of a canary: shift ``weight`` percent of traffic, or ``pause`` seconds."""

    weight: Weight | None = None
    pause: Seconds | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> CanaryStep:
        if (self.weight is None) == (self.pause is None):
            raise _fail("a step is either weight: N or pause: seconds (exactly one)")
        return self


class CanaryAnalysis(_Model):
    """Thresholds that fail a canary step; an unset threshold is not checked."""

    max_error_rate: Fraction | None = None
    max_p99_latency_ms: PositiveNumber | None = None
    min_requests: NonNegativeInt = 100
    """Requests the canary must have served before the thresholds are judged."""


def _default_canary_steps() -> list[CanaryStep]:
    return [CanaryStep(weight=10), CanaryStep(pause=60.0), CanaryStep(weight=100)]


class CanaryPolicy(_Model):
    """Steps for ``update_mode: canary``; always present so ``--mode canary`` works
    on any service (the default in docs/design.md: 10%, wait a minute, 100%)."""

    steps: list[CanaryStep] = Field(default_factory=_default_canary_steps)
    analysis: CanaryAnalysis = Field(default_factory=CanaryAnalysis)

    @field_validator("steps")
    @classmethod
    def _ends_at_full_weight(cls, steps: list[CanaryStep]) -> list[CanaryStep]:
        if not steps:
            raise _fail("must not be empty")
        weights = [step.weight for step in steps if step.weight is not None]
        if not weights or weights[-1] != 100:
            raise _fail(
                "the last weight must be 100 (a canary ends with all traffic on the new version)"
            )
        return steps


class LoadBalancerLimits(_Model):
    """``service.load_balancer:``: how long the load balancer waits for clients and
    how many client connections it holds (docs/load-balancer.md)."""

    header_timeout_s: PositiveSeconds = 20.0
    body_timeout_s: PositiveSeconds = 30.0
    idle_timeout_s: PositiveSeconds = 75.0
    max_connections: PositiveInt = 10000


class ServiceSection(_Model):
    """The ``service:`` section: replicas, probes, updates, load balancing."""

    readiness_probe: ReadinessProbe = Field(default_factory=ReadinessProbe)
    replicas: NonNegativeInt | None = None
    """A fixed count; None exactly when ``replica_policy`` is given."""
    replica_policy: ReplicaPolicy | None = None
    autoscaling_config: AutoscalingConfig | None = Field(default=None, exclude=True)
    """Ray Serve's name for ``replica_policy``; always None once validated (it becomes one)."""
    update_mode: UpdateModeField = "rolling"
    update_deadline_s: PositiveSeconds = 600.0
    history_limit: PositiveInt = 10
    """How many versions keep their workdir snapshot (like revisionHistoryLimit)."""
    rolling_update: RollingUpdate = Field(default_factory=RollingUpdate)
    canary: CanaryPolicy = Field(default_factory=CanaryPolicy)
    max_ongoing_requests: PositiveInt = 100
    max_queued_requests: QueueLimit = -1
    """-1 is unbounded; beyond the limit the load balancer answers 503 at once."""
    load_balancing_policy: LoadBalancingPolicyField = "least_load"
    load_balancer: LoadBalancerLimits = Field(default_factory=LoadBalancerLimits)
    request_timeout_s: PositiveSeconds | None = None
    """A replica's time to complete a response (504 after); None: no limit."""
    cold_start_timeout_s: PositiveSeconds = 60.0
    """With ``min_replicas: 0``: how long the load balancer holds a request that
    arrives while no replica serves, waiting for the first to become ready (503 after)."""
    graceful_shutdown_wait_loop_s: PositiveSeconds = 2.0
    graceful_shutdown_timeout_s: Seconds = 20.0
    health_check_period_s: PositiveSeconds = 10.0
    health_check_timeout_s: PositiveSeconds = 30.0
    user_config: JsonData = None
    reconfigure_path: UrlPath | None = None
    access_log: StrictBool = False
    """The load balancer logs one JSON line per request (docs/observability.md)."""
    port: PortNumber | None = None
    """The endpoint's port; None means the next free one from 30001."""

    @field_validator("readiness_probe", mode="before")
    @classmethod
    def _bare_path(cls, value: Any) -> Any:
        """SkyServe allows ``readiness_probe: /health``; store the object form only,
        so consumers and the change classifier see one shape."""
        if isinstance(value, str):
            return {"path": value}
        if value is not None and not isinstance(value, (dict, ReadinessProbe)):
            raise _fail("must be a URL path or a mapping with path:")
        return value

    @model_validator(mode="before")
    @classmethod
    def _one_replica_by_default(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and data.get("replicas") is None
            and data.get("replica_policy") is None
            and data.get("autoscaling_config") is None
        ):
            return {**data, "replicas": 1}
        return data

    @model_validator(mode="after")
    def _count_or_policy(self) -> ServiceSection:
        if self.replicas is not None and self.replica_policy is not None:
            raise _fail(
                "replicas and replica_policy are mutually exclusive"
                " (a fixed count, or autoscaling bounds)"
            )
        if self.autoscaling_config is not None:
            if self.replica_policy is not None:
                raise _fail(
                    "replica_policy and autoscaling_config are mutually exclusive"
                    " (autoscaling_config is Ray Serve's name for replica_policy; use one)"
                )
            if self.replicas is not None:
                raise _fail(
                    "replicas and autoscaling_config are mutually exclusive"
                    " (a fixed count, or autoscaling bounds)"
                )
        return self

    @model_validator(mode="wrap")
    @classmethod
    def _ray_synonym(cls, data: Any, handler: Callable[[Any], ServiceSection]) -> ServiceSection:
        """Store ``autoscaling_config`` as the ``replica_policy`` it means."""
        section = handler(data)
        if section.autoscaling_config is None:
            return section
        policy = section.autoscaling_config.as_replica_policy()
        return section.model_copy(update={"replica_policy": policy, "autoscaling_config": None})

    @property
    def target_replicas(self) -> int:
        """The count to run now, before any autoscaling decision."""
        if self.replicas is not None:
            return self.replicas
        assert self.replica_policy is not None  # guaranteed by _count_or_policy
        initial = self.replica_policy.initial_replicas
        return self.replica_policy.min_replicas if initial is None else initial

    def max_surge_count(self, target: int) -> int:
        """Replicas that may run above ``target`` during an update; a percent rounds up."""
        return _resolve_percent(self.rolling_update.max_surge, target, round_up=True)

    def max_unavailable_count(self, target: int) -> int:
        """Ready replicas that may be missing below ``target``; a percent rounds down.

        As in Kubernetes, when both limits resolve to 0 (say ``max_surge: 0`` and
        ``max_unavailable: 10%`` of 3) one replica may be unavailable, or the update
        could never start. Never more than ``target``.
        """
        unavailable = _resolve_percent(self.rolling_update.max_unavailable, target, round_up=False)
        if unavailable == 0 and target > 0 and self.max_surge_count(target) == 0:
            unavailable = 1
        return min(unavailable, target)


class Resources(_Model):
    """What one replica needs.

    ``cpus``/``memory``/``accelerators`` are for the Ray backend's placement; the
    other keys are SkyPilot's, accepted (and type-checked) so SkyServe task files run
    unchanged, and ignored by the local backend, which runs on this machine as is.
    """

    cpus: CpuAmount | None = None
    memory: MemoryAmount | None = None
    accelerators: Accelerators | None = None
    infra: StrictStr | None = None
    cloud: StrictStr | None = None
    region: StrictStr | None = None
    zone: StrictStr | None = None
    instance_type: StrictStr | None = None
    use_spot: StrictBool | None = None
    disk_size: DiskAmount | None = None
    disk_tier: StrictStr | None = None
    ports: Ports | None = None
    image_id: ImageId | None = None
    labels: dict[StrictStr, ScalarText] | None = None
    any_of: list[Resources] | None = None
    ordered: list[Resources] | None = None
    job_recovery: StringOrJsonMapping | None = None

    @property
    def min_cpus(self) -> float | None:
        """The CPU count asked for (``"4+"`` -> 4.0), or None when unspecified."""
        return None if self.cpus is None else float(str(self.cpus).rstrip("+"))

    @property
    def min_memory_gb(self) -> float | None:
        """Memory in GiB asked for (``"512MB"`` -> 0.5), or None when unspecified."""
        if self.memory is None:
            return None
        match = _MEMORY.fullmatch(str(self.memory).strip())
        assert match is not None  # validated
        return float(match.group(1)) * _MEMORY_UNITS_GB[(match.group(2) or "gb").lower()]

    def accelerator_choices(self) -> list[tuple[str, float]]:
        """Acceptable ``(name, count)`` options in preference order; [] when none."""
        value = self.accelerators
        if value is None:
            return []
        if isinstance(value, dict):
            items = [k if n is None else f"{k}:{n}" for k, n in value.items()]
        else:
            items = [value] if isinstance(value, str) else list(value)
        choices = []
        for item in items:
            name, _, count = item.partition(":")
            choices.append((name, float(count) if count else 1.0))
        return choices


class ServiceSpec(_Model):
    """One service file, validated. After the loaders, ``name`` is always set and
    ``workdir`` (if any) is an absolute path to an existing directory."""

    name: ServiceName | None = None
    service: ServiceSection = Field(default_factory=ServiceSection)
    resources: Resources = Field(default_factory=Resources)
    envs: dict[EnvName, ScalarText] = Field(default_factory=dict)
    workdir: NonEmptyText | None = None
    setup: Text | None = None
    run: Command | None = None
    import_path: ImportPath | None = None
    num_nodes: NumNodes = 1
    """SkyPilot's key, accepted for compatibility: a replica is one process, so only 1."""
    file_mounts: JsonMapping = Field(default_factory=dict)
    """SkyPilot's key, accepted for compatibility and ignored: replicas run locally."""

    @model_validator(mode="after")
    def _command_or_python(self) -> ServiceSpec:
        if self.run is not None and self.import_path is not None:
            raise _fail(
                "run and import_path are mutually exclusive"
                " (a replica is a command or a Python class, not both)"
            )
        if self.run is None and self.import_path is None:
            raise _fail(
                "one of run or import_path is required"
                " (a command to start, or a module:attr to serve)"
            )
        return self

    @property
    def replica_kind(self) -> Literal["command", "python"]:
        return "command" if self.run is not None else "python"

    def spec_json(self) -> str:
        """Canonical JSON (sorted keys, no spaces): what is stored per version and
        compared, so two specs are equal exactly when their texts are equal."""
        return json.dumps(
            self.model_dump(mode="json"),
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> ServiceSpec:
        """Read back :meth:`spec_json` (does not re-check that ``workdir`` exists:
        a stored version outlives the directory it was copied from)."""
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise SpecError(TOP_LEVEL, f"not valid JSON: {exc}") from None
        return _validate(cls, data)


# ----------------------------------------------------------- pydantic -> SpecError

_TYPE_MESSAGES = {
    "missing": "required",
    "extra_forbidden": "unknown field",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "dict_type": "must be a mapping",
    "list_type": "must be a list",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "invalid_key": "field names must be strings",
    "recursion_loop": "refers to itself",
}

_ALIASES = {
    "gpu": "accelerators",
    "gpus": "accelerators",
    "command": "run",
    "cmd": "run",
    "env": "envs",
    "environment": "envs",
    "env_vars": "envs",
    "num_replicas": "replicas",
    "autoscaling_config": "replica_policy",
    "autoscaling": "replica_policy",
}
"""Names from neighbouring tools (Ray Serve, Kubernetes, Compose) that spelling
distance would not find or would map wrongly (``gpus`` is not ``cpus``)."""

_SIMPLE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _validate(model: type[ServiceSpec], data: object) -> ServiceSpec:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _convert(exc, model) from None
    except RecursionError:
        raise SpecError(TOP_LEVEL, "nested too deeply") from None


def _convert(exc: ValidationError, root: type[BaseModel]) -> SpecError:
    """Every error, each as one plain line. Unknown fields go first: a misspelt field
    also shows up as a missing one, and the typo is the real cause, so a "required"
    for the very field a typo's hint names is left out."""
    errors = exc.errors(include_url=False, include_input=False)
    ordered = sorted(errors, key=lambda e: e["type"] != "extra_forbidden")
    found: list[tuple[str | None, str]] = []
    hinted: set[str] = set()
    for error in ordered:
        loc = list(error["loc"])
        if loc and loc[-1] == "[key]":  # a bad mapping key: report it at the key
            loc.pop()
        if error["type"] == "extra_forbidden":
            message = _unknown_field_message(root, loc)
            hint = _HINT.search(message)
            if hint:
                hinted.add(_format_loc([*loc[:-1], *hint.group(1).split(".")]))
        elif error["type"] in _TYPE_MESSAGES:
            message = _TYPE_MESSAGES[error["type"]]
        else:
            message = _plain(error["msg"])
        path = _format_loc(loc)
        if error["type"] == "missing" and path in hinted:
            continue
        if (path, message) not in found:
            found.append((path, message))
    (first_path, first_message), *more = found
    return SpecError(first_path, first_message, more=more)


_HINT = re.compile(r"did you mean ([\w.-]+)\?")


def _plain(msg: str) -> str:
    msg = msg.removeprefix("Value error, ").replace("Input should be", "must be")
    return msg[:1].lower() + msg[1:] if msg else "is invalid"


def _format_loc(loc: list[int | str]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _SIMPLE_KEY.fullmatch(part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part)}]"
    return text or TOP_LEVEL


def _unknown_field_message(root: type[BaseModel], loc: list[int | str]) -> str:
    key = loc[-1] if loc else None
    model = _model_at(root, loc[:-1])
    if model is None or not isinstance(key, str):
        return "unknown field"
    for name, info in model.model_fields.items():  # e.g. `replicas:` outside `service:`
        child = _find_model(info.annotation)
        is_list = typing.get_origin(info.annotation) is list
        if child is not None and child is not model and not is_list and key in child.model_fields:
            return f"unknown field (did you mean {name}.{key}?)"
    alias = _ALIASES.get(key.lower())
    if alias in model.model_fields:
        return f"unknown field (did you mean {alias}?)"
    close = difflib.get_close_matches(key.lower(), list(model.model_fields), n=1, cutoff=0.6)
    if close:
        return f"unknown field (did you mean {close[0]}?)"
    return "unknown field"


def _model_at(root: type[BaseModel], loc: list[int | str]) -> type[BaseModel] | None:
    model = root
    for part in loc:
        if isinstance(part, int):  # a list index: the item model was found with the field
            continue
        info = model.model_fields.get(part)
        found = _find_model(info.annotation) if info is not None else None
        if found is None:
            return None
        model = found
    return model


def _find_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        for arg in typing.get_args(annotation):
            found = _find_model(arg)
            if found is not None:
                return found
    return None


# ------------------------------------------------------------------------- loading


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load`` that refuses duplicate keys: YAML keeps the last one
    silently, so ``replicas: 2`` … ``replicas: 5`` would hide a real mistake."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # unhashable key: the base class reports it
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
        return super().construct_mapping(node, deep=deep)


def _read_document(path: str | Path) -> object:
    """The parsed YAML of a file, or a SpecError naming the file."""
    label = str(path)
    file = Path(path)

    def error(message: str) -> SpecError:
        return SpecError(None, message, file=label)

    try:
        info = file.stat()
        if stat.S_ISDIR(info.st_mode):
            raise error("is a directory, not a file")
        if info.st_size > MAX_FILE_BYTES:
            raise error(f"is larger than 1 MiB ({info.st_size} bytes); is this the right file?")
        with file.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise error("no such file") from None
    except NotADirectoryError:
        raise error("no such file") from None
    except PermissionError:
        raise error("permission denied") from None
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise error("is larger than 1 MiB; is this the right file?")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"is not UTF-8 text (invalid byte at offset {exc.start})") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        raise error(_yaml_message(exc)) from None
    except yaml.YAMLError as exc:
        raise error(f"invalid YAML: {exc}") from None
    except RecursionError:
        raise error("invalid YAML: nested too deeply") from None
    if data is None:
        raise error("file is empty")
    return data


def _yaml_message(exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark or exc.context_mark
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = ", ".join(part for part in (exc.context, exc.problem) if part) or "syntax error"
    return f"invalid YAML{where}: {problem}"


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if _is_number(value):
        return "a number"
    return f"a {type(value).__name__}"


def _folder_name(base_dir: Path) -> str:
    """SkyServe-style default name: the folder of the file, made name-safe the
    obvious way (``http_server`` -> ``http-server``)."""
    return base_dir.resolve().name.lower().replace("_", "-")


def parse_service(data: object, *, base_dir: Path, name: str | None = None) -> ServiceSpec:
    """Validate one service document already parsed from YAML/JSON.

    ``base_dir`` stands for the file's folder: relative ``workdir`` paths resolve
    against it, and its name is the fallback service name. ``name`` (the CLI's
    ``-n``) wins over the document's ``name:``.
    """
    if not isinstance(data, dict):
        raise SpecError(TOP_LEVEL, f"must be a mapping of service fields, not {_kind(data)}")
    fields: dict[Any, Any] = dict(data)
    if name is not None:
        fields["name"] = name
    elif fields.get("name") is None:
        derived = _folder_name(base_dir)
        if not NAME_PATTERN.fullmatch(derived):
            raise SpecError(
                "name",
                f"no name given, and the folder name {_short_repr(derived)} is not a valid"
                f" service name ({_NAME_RULE}); set name: in the file or pass a name",
            )
        fields["name"] = derived
    spec = _validate(ServiceSpec, fields)
    return _with_absolute_workdir(spec, base_dir)


def _with_absolute_workdir(spec: ServiceSpec, base_dir: Path) -> ServiceSpec:
    """Resolve ``workdir`` now, while the file's folder is known: the controller
    runs elsewhere and later, and copies the directory per version."""
    if spec.workdir is None:
        return spec
    try:
        path = Path(spec.workdir).expanduser()
        if not path.is_absolute():
            path = base_dir.resolve() / path
        path = path.resolve()
        exists = path.is_dir()
    except (OSError, RuntimeError, ValueError):
        raise SpecError("workdir", f"no such directory: {spec.workdir}") from None
    if not exists:
        raise SpecError("workdir", f"no such directory: {path}")
    return spec.model_copy(update={"workdir": str(path)})


def load_service_file(path: str | Path, name: str | None = None) -> ServiceSpec:
    """Read and validate a service file (what ``steady up``/``update`` take).

    Every problem, from a missing file to a bad field, is one SpecError whose text
    starts with the file as given: ``service.yaml: service.replicas: ...``.
    """
    label = str(path)
    data = _read_document(path)
    if (
        isinstance(data, dict)
        and "services" in data
        and "run" not in data
        and "import_path" not in data
    ):
        raise SpecError(
            "services",
            "unknown field (this looks like a fleet file; use steady deploy)",
            file=label,
        )
    if not isinstance(data, dict):
        raise SpecError(
            None, f"file must contain a mapping of service fields, not {_kind(data)}", file=label
        )
    try:
        return parse_service(data, base_dir=Path(path).absolute().parent, name=name)
    except SpecError as exc:
        raise exc.in_file(label) from None


def load_fleet_file(path: str | Path) -> list[ServiceSpec]:
    """Read a fleet file (``steady deploy``): ``services: [...]``, each item a
    service document with its own ``name``. The file is the whole desired state,
    so an item without a name, or two items with one name, is ambiguous: refused."""
    label = str(path)
    data = _read_document(path)
    if not isinstance(data, dict):
        raise SpecError(
            None, f"file must contain a mapping with services: [...], not {_kind(data)}", file=label
        )
    for key in data:
        if key != "services":
            hint = (
                " (did you mean services?)"
                if difflib.get_close_matches(str(key), ["services"])
                else ""
            )
            raise SpecError(_format_loc([str(key)]), f"unknown field{hint}", file=label)
    items = data.get("services")
    if items is None:
        raise SpecError("services", "required (a list of services)", file=label)
    if not isinstance(items, list):
        raise SpecError("services", "must be a list of services", file=label)
    if not items:
        raise SpecError("services", "must not be empty", file=label)
    base_dir = Path(path).absolute().parent
    specs: list[ServiceSpec] = []
    first_index: dict[str, int] = {}
    mistakes: list[SpecError] = []  # every item is checked: all mistakes in one report
    for index, item in enumerate(items):
        where = f"services[{index}]"
        if not isinstance(item, dict):
            mistakes.append(
                SpecError(where, f"must be a mapping of service fields, not {_kind(item)}")
            )
            continue
        if item.get("name") is None:
            mistakes.append(
                SpecError(f"{where}.name", "required (every service in a fleet file needs a name)")
            )
        try:
            spec = parse_service(item, base_dir=base_dir)
        except SpecError as exc:
            mistakes.append(exc.under(where))
            continue
        if spec.name is None:
            continue
        if spec.name in first_index:
            mistakes.append(
                SpecError(
                    f"{where}.name",
                    f"duplicate service name {spec.name!r} "
                    f"(also services[{first_index[spec.name]}])",
                )
            )
        first_index[spec.name] = index
        specs.append(spec)
    if mistakes:
        raise SpecError.combine(mistakes, file=label)
    return specs
