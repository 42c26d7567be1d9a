"""The route table's ``mirror`` block: what a canary's shadow step tells the load
balancer to mirror, and how to compare the answers (docs/canary.md).

Both sides import this module: the controller writes it from the service file
(``service.canary.shadow`` and the step's share), every load-balancer worker reads
it back with :meth:`Mirror.from_json`, which checks every field (a table is input
from another process).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from steadyserve.core.shadow.compare import normalise

# A mirrored body is copied from what the load balancer holds for a retry.
MAX_BODY_BYTES = 256 * 1024


@dataclass(frozen=True)
class Mirror:
    """Mirror ``percent`` of the requests to ``version`` (its replicas are in the
    table at weight 0) and compare its answers with the stable ones."""

    version: int
    percent: int
    methods: tuple[str, ...] = ("GET", "HEAD", "OPTIONS")
    max_body_bytes: int = 64 * 1024
    headers: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    noise_share: float = 0.2
    stream_tolerance: float = 0.2

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "percent": self.percent,
            "methods": list(self.methods),
            "max_body_bytes": self.max_body_bytes,
            "headers": list(self.headers),
            "ignore": list(self.ignore),
            "noise_share": self.noise_share,
            "stream_tolerance": self.stream_tolerance,
        }

    @classmethod
    def from_json(cls, value: Any) -> Mirror | None:
        """None for null; ValueError names the field that is wrong."""
        if value is None:
            return None
        if not isinstance(value, dict):
            raise ValueError("route table: mirror must be an object or null")
        version = _int(value, "version", 1, 10**9)
        percent = _int(value, "percent", 1, 100)
        body = _int(value, "max_body_bytes", 0, MAX_BODY_BYTES)
        methods = _words(value, "methods")
        headers = tuple(h.lower() for h in _words(value, "headers"))
        try:
            ignore = tuple(normalise(p) for p in _words(value, "ignore"))
        except ValueError as exc:
            raise ValueError(f"route table: mirror.ignore: {exc}") from None
        return cls(
            version,
            percent,
            methods,
            body,
            headers,
            ignore,
            _share(value, "noise_share"),
            _share(value, "stream_tolerance"),
        )


def _int(value: dict[str, Any], name: str, low: int, high: int) -> int:
    n = value.get(name)
    if not isinstance(n, int) or isinstance(n, bool) or not low <= n <= high:
        raise ValueError(f"route table: mirror.{name} must be an int {low}-{high}")
    return n


def _share(value: dict[str, Any], name: str) -> float:
    n = value.get(name)
    if isinstance(n, bool) or not isinstance(n, (int, float)) or not 0 <= n <= 1:
        raise ValueError(f"route table: mirror.{name} must be a number 0-1")
    return float(n)


def _words(value: dict[str, Any], name: str) -> tuple[str, ...]:
    items = value.get(name)
    if not isinstance(items, list) or not all(
        isinstance(i, str) and i and i.isascii() and len(i) <= 200 for i in items
    ):
        raise ValueError(f"route table: mirror.{name} must be a list of strings")
    return tuple(items)
