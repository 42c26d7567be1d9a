"""What differs between the stable version's answer to a request and the new version's.

A difference is named by a key the load balancer counts and the controller judges:

* ``status``: the status class differs (a 200 against a 201 is alike; a 200 against
  a 404 or a 500 is not);
* ``header:NAME``: a header the service file names (``shadow_headers``) differs;
* ``removed $.a.b``, ``added $.a.b``, ``changed $.a.b``: a JSON body compared
  structurally, a field missing from the new answer, new in it, or of another
  value (a list's positions are written ``[*]``, so a path names a field of every
  element, and noise learned on one element covers them all);
* ``body``: a body that is not JSON differs byte for byte (or one side is JSON and
  the other not);
* ``length``: a streamed answer (server-sent events, NDJSON, an LLM's tokens) is
  compared by its shape: its length in events (or bytes, when it has no events)
  may differ by ``stream_tolerance`` of the larger, its text may differ at will.

``ignored(path, ignore)`` says whether a ``$``-path is under one of the file's
``ignore:`` paths (or under a learned noise path): a path's whole subtree goes
with it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Keys the comparison yields besides the JSON paths (see the module docstring).
STATUS = "status"
NO_ANSWER = "no answer"  # the new version's copy got none: refused, reset, not HTTP, late
BODY = "body"
LENGTH = "length"
HEADER = "header:"
KINDS = ("removed", "added", "changed")

# A JSON body nested deeper than this, or with more leaves, is compared byte for
# byte instead: a hostile replica must not make the load balancer walk forever.
MAX_DEPTH = 64
MAX_LEAVES = 20_000
# Different paths one comparison reports at most (the rest is one "(more)" key).
MAX_KEYS = 32
MORE = "(more paths)"
# A key longer than this is cut (a hostile replica's field names must not grow the
# load balancer's counts: they keep up to 256 signatures of up to 33 keys).
MAX_KEY_CHARS = 200

STREAM_TYPES = ("text/event-stream", "application/x-ndjson", "application/jsonl")

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
_PATH = re.compile(
    r"\$(?:\.[A-Za-z_][A-Za-z0-9_-]*|\[\*\]|\[\d{1,9}\]|\[\"(?:[^\"\\]|\\.)*\"\])*\Z"
)
_INDEX = re.compile(r"\[\d{1,9}\]")


@dataclass(frozen=True)
class Answer:
    """One answer as the comparison needs it: status, the named headers (lower-case
    names), and the body (``complete`` False: the body was longer than the load
    balancer keeps, so only its status and headers are compared)."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    complete: bool = True

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()


@dataclass(frozen=True)
class Rules:
    """How two answers are compared (``service.canary.shadow``)."""

    headers: tuple[str, ...] = ()
    """Lower-case header names whose values must be equal."""
    ignore: tuple[str, ...] = ()
    """``$``-paths never counted as differing (normalised by :func:`normalise`)."""
    stream_tolerance: float = 0.2
    """A streamed answer's length may differ by this share of the larger one."""


def normalise(path: str) -> str:
    """``$.items[3].id`` -> ``$.items[*].id``; ValueError names what is wrong."""
    if not isinstance(path, str) or not _PATH.match(path):
        raise ValueError(
            f'{path!r} is not a JSON path like $.field, $.list[*].field or $["odd key"]'
        )
    return _INDEX.sub("[*]", path)


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if _NAME.match(key) else f"{path}[{json.dumps(key)}]"


def ignored(path: str, ignore: Collection[str]) -> bool:
    """Whether ``path`` is one of ``ignore`` or inside one of them."""
    if not ignore:
        return False
    if path in ignore:
        return True
    return any(ch in ".[" and i > 0 and path[:i] in ignore for i, ch in enumerate(path))


def path_of(key: str) -> str | None:
    """The ``$``-path of a JSON key (``changed $.a`` -> ``$.a``); None for the others."""
    kind, _, path = key.partition(" ")
    return path if kind in KINDS and path.startswith("$") else None


def streamed(answer: Answer) -> bool:
    return answer.content_type in STREAM_TYPES


def differences(primary: Answer, candidate: Answer, rules: Rules = Rules()) -> frozenset[str]:
    """The keys on which ``candidate`` differs from ``primary`` (empty: alike).

    Paths under ``rules.ignore`` are left out. A candidate whose status class
    differs is reported by ``status`` alone: its body is another answer's.
    """
    if primary.status // 100 != candidate.status // 100:
        return frozenset({STATUS})
    out: set[str] = set()
    for name in rules.headers:
        if primary.headers.get(name) != candidate.headers.get(name):
            out.add(HEADER + name)
    if not (primary.complete and candidate.complete):
        return frozenset(out)
    if streamed(primary) or streamed(candidate):
        if not _same_shape(primary.body, candidate.body, rules.stream_tolerance):
            out.add(LENGTH)
        return frozenset(out)
    if primary.body == candidate.body:
        return frozenset(out)
    a, b = _json(primary), _json(candidate)
    if a is _NOT_JSON or b is _NOT_JSON:
        out.add(BODY)
        return frozenset(out)
    keys: set[str] = set()
    budget = [MAX_LEAVES]
    if not _diff(a, b, "$", frozenset(rules.ignore), keys, 0, budget):
        out.add(BODY)  # too deep or too large to walk: byte for byte
    elif len(keys) > MAX_KEYS:
        out.update(sorted(keys)[:MAX_KEYS])
        out.add(MORE)
    else:
        out.update(keys)
    return frozenset(k if len(k) <= MAX_KEY_CHARS else k[: MAX_KEY_CHARS - 3] + "..." for k in out)


_NOT_JSON: Any = object()


def _json(answer: Answer) -> Any:
    ctype = answer.content_type
    if ctype != "application/json" and not ctype.endswith("+json"):
        return _NOT_JSON
    try:
        return json.loads(answer.body)
    except (ValueError, RecursionError):
        return _NOT_JSON


def _diff(
    a: Any, b: Any, path: str, ignore: frozenset[str], out: set[str], depth: int, budget: list[int]
) -> bool:
    """Add the differing keys under ``path`` to ``out``; False when the walk is cut
    (too deep or too many leaves)."""
    budget[0] -= 1
    if depth > MAX_DEPTH or budget[0] < 0:
        return False
    if ignored(path, ignore):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        for key in a.keys() | b.keys():
            child = _child(path, key)
            if key not in b:
                if not ignored(child, ignore):
                    out.add(f"removed {child}")
            elif key not in a:
                if not ignored(child, ignore):
                    out.add(f"added {child}")
            elif not _diff(a[key], b[key], child, ignore, out, depth + 1, budget):
                return False
        return True
    if isinstance(a, list) and isinstance(b, list):
        child = f"{path}[*]"
        for x, y in zip(a, b, strict=False):
            if not _diff(x, y, child, ignore, out, depth + 1, budget):
                return False
        if len(a) != len(b) and not ignored(child, ignore):
            out.add(f"{'removed' if len(a) > len(b) else 'added'} {child}")
        return True
    if not _same_value(a, b):
        out.add(f"changed {path}")
    return True


def _same_value(a: Any, b: Any) -> bool:
    """JSON scalars (and a container against another kind): 1 and 1.0 are alike,
    true and 1 are not."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return True
        return a == b
    if type(a) is not type(b):
        return False
    return bool(a == b)


def _units(body: bytes) -> int:
    """A stream's length: its events (SSE ``data:`` lines, or NDJSON lines), else bytes."""
    events = body.count(b"\ndata:") + (1 if body.startswith(b"data:") else 0)
    if events:
        return events
    lines = [line for line in body.split(b"\n") if line.strip()]
    return len(lines) if len(lines) > 1 else len(body)


def _same_shape(a: bytes, b: bytes, tolerance: float) -> bool:
    x, y = _units(a), _units(b)
    return abs(x - y) <= tolerance * max(x, y)


def keys_in(keys: Iterable[str]) -> str:
    """A comparison's keys as one string (the signature the load balancer counts)."""
    return "\n".join(sorted(keys))


def keys_of(signature: str) -> frozenset[str]:
    return frozenset(k for k in signature.split("\n") if k)
