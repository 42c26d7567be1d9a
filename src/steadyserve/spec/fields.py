"""Value checkers and the field types built on them.

Each checker validates completely and raises a plain message, so pydantic's
own wordy checks behind it never fail.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
)

from steadyserve.core.routing.registry import POLICIES
from steadyserve.core.strategies import selectable_modes
from steadyserve.oneline import is_number
from steadyserve.spec.errors import _NAME_RULE, NAME_PATTERN, _fail

# ------------------------------------------------------------------ value checkers
# Each checker validates completely and raises a plain message, so pydantic's own
# (lax, wordy) checks behind it never fail. Counts reject bools and fractions, and
# strings: a quoted "2" in YAML is more likely a mistake than an intent.


def _finite(value: object) -> float | None:
    """The value as a finite float, or None (bools, strings, inf/nan, 10**400)."""
    if not is_number(value):
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


def _update_mode(value: object) -> str:
    """One of the update strategies a user may ask for (core/strategies/), read from
    the registry when a file is checked, so a strategy registered later is accepted."""
    modes = selectable_modes()
    if not isinstance(value, str) or value not in modes:
        raise _fail("must be one of " + ", ".join(modes))
    return value


def _routing_policy(value: object) -> str:
    """One of the routing policies of the registry (core/routing/registry.py), read
    when a file is checked, so a policy registered later is accepted."""
    names = tuple(POLICIES)
    if not isinstance(value, str) or value not in names:
        raise _fail("must be one of " + ", ".join(names))
    return value


def _url_path(value: object) -> str:
    if (
        not isinstance(value, str)
        or not value.startswith("/")
        or re.search(r"[\s\x00-\x1f]", value)
    ):
        raise _fail("must be a URL path starting with /")
    return value


_AFFINITY_KEY = re.compile(r"header:[!#$%&'*+.^_`|~0-9A-Za-z-]+|cookie:[^\s;=,]+|json:(/[^/]*)*")


def _affinity_key(value: object) -> str:
    """``header:NAME``, ``cookie:NAME`` or ``json:POINTER`` (RFC 6901: ``/user``,
    ``/metadata/session``; ``""`` after ``json:`` is the whole body)."""
    if isinstance(value, str) and _AFFINITY_KEY.fullmatch(value):
        return value
    raise _fail(
        'must be "header:NAME", "cookie:NAME" or "json:/pointer" (like header:X-Session-ID)'
    )


def _route_prefix(value: object) -> str:
    """Ray Serve's rule: ``/`` or ``/a/b``, no trailing slash, no
    wildcard braces (docs/ray-serve.md)."""
    if (
        not isinstance(value, str)
        or not value.startswith("/")
        or (value != "/" and value.endswith("/"))
        or re.search(r"[\s\x00-\x1f{}?#]", value)
    ):
        raise _fail('must be "/" or a URL path like /summarize (no trailing /, no {, }, ?, #)')
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
    if is_number(value):
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


_QPS_TARGET_MESSAGE = (
    'must be a number > 0 or a mapping of accelerators to numbers > 0, like {"H100:1": 10, L4: 3}'
)


def _qps_target(value: object) -> float | dict[str, float]:
    """SkyServe's ``target_qps_per_replica``: one number, or one per accelerator
    (keys with or without a count: ``A100:1`` and ``L4`` both name an accelerator)."""
    if not isinstance(value, dict):
        number = _finite(value)
        if number is None or number <= 0:
            raise _fail("must be a number > 0")
        return number
    if not value:
        raise _fail(_QPS_TARGET_MESSAGE)
    out: dict[str, float] = {}
    named: dict[str, str] = {}
    for key, qps in value.items():
        if not isinstance(key, str) or not _accelerator_count_ok(key):
            raise _fail(f"key {key!r} is not an accelerator like H100 or H100:1")
        number = _finite(qps)
        if number is None or number <= 0:
            raise _fail(f"[{key}] must be a number > 0")
        # A replica is matched by its accelerator's name, so a second key for
        # the same name could never apply.
        name = key.partition(":")[0]
        if name in named:
            raise _fail(
                f"keys {named[name]!r} and {key!r} both name {name} (a replica is matched by"
                " its accelerator's name; give each accelerator one target)"
            )
        named[name] = key
        out[key] = number
    return out


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
QpsTarget = Annotated[float | dict[str, float], BeforeValidator(_qps_target)]
Fraction = Annotated[float, BeforeValidator(_number(ge=0, le=1))]
UrlPath = Annotated[str, BeforeValidator(_url_path)]
AffinityKey = Annotated[str, BeforeValidator(_affinity_key)]
RoutePrefix = Annotated[str, BeforeValidator(_route_prefix)]
Command = Annotated[str, BeforeValidator(_command)]
NonEmptyText = Annotated[str, BeforeValidator(_non_empty_text)]
Text = Annotated[str, BeforeValidator(_optional_text)]
ImportPath = Annotated[str, BeforeValidator(_import_path)]
ServiceName = Annotated[str, BeforeValidator(_service_name)]
EnvName = Annotated[str, BeforeValidator(_env_name)]
HeaderName = Annotated[str, BeforeValidator(_header_name)]
ScalarText = Annotated[str, BeforeValidator(_scalar_text)]
JsonData = Annotated[Any, BeforeValidator(_json_data)]

UpdateModeField = Annotated[str, BeforeValidator(_update_mode)]
LoadBalancingPolicyField = Annotated[str, BeforeValidator(_routing_policy)]
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
