"""The load report: what each load-balancer worker (and the gateway) posts to the
controller twice a second.

The controller drains a replica only when every worker reports nothing in
flight for it, scales on the request counts, and renders ``metrics`` (the
traffic counters of wire/counts.py) on its ``/metrics``. A report comes from
another process, so :meth:`LoadReport.from_json` checks what the controller
relies on; ``metrics`` is kept as sent and read by wire/counts.py and
wire/exposition.py, which tolerate missing parts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class LoadReport:
    """One worker's counts since its process started (cumulative), keyed by replica id."""

    table: str  # the route table's key (epoch:version) the worker routes by
    inflight: dict[int, int]
    requests: dict[int, int]
    errors: dict[int, int] = field(default_factory=dict)
    queued: int = 0
    worker: str = ""  # the worker's own id (its pid); one LB process may have several
    lb_pid: int | None = None  # the LB process the controller started
    consumer: str | None = None  # set by the gateway: one more view of the service
    metrics: dict[str, Any] | None = None
    time: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "table": self.table,
            "inflight": {str(k): v for k, v in self.inflight.items()},
            "requests": {str(k): v for k, v in self.requests.items()},
            "errors": {str(k): v for k, v in self.errors.items()},
            "queued": self.queued,
            "worker": self.worker,
            "time": self.time,
        }
        if self.lb_pid is not None:
            out["lb_pid"] = self.lb_pid
        if self.consumer is not None:
            out["consumer"] = self.consumer
        if self.metrics is not None:
            out["metrics"] = self.metrics
        return out

    @classmethod
    def from_json(cls, data: Any) -> LoadReport:
        """ValueError names what is wrong."""
        if not isinstance(data, dict):
            raise ValueError("load report: expected a JSON object")
        lb_pid = data.get("lb_pid")
        consumer = data.get("consumer")
        metrics = data.get("metrics")
        moment = data.get("time", 0.0)
        return cls(
            table=str(data.get("table", "")),
            inflight=_counts(data, "inflight"),
            requests=_counts(data, "requests"),
            errors=_counts(data, "errors"),
            queued=_count(data.get("queued") or 0, "queued"),
            worker=str(data.get("worker", "")),
            lb_pid=lb_pid if isinstance(lb_pid, int) and not isinstance(lb_pid, bool) else None,
            consumer=consumer if isinstance(consumer, str) and consumer else None,
            metrics=metrics if isinstance(metrics, dict) else None,
            time=float(moment) if isinstance(moment, (int, float)) else 0.0,
        )


def _counts(data: Mapping[str, Any], name: str) -> dict[int, int]:
    raw = data.get(name) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"load report: {name} must map replica ids to integers")
    try:
        return {int(k): _count(v, name) for k, v in raw.items()}
    except (TypeError, ValueError):
        raise ValueError(f"load report: {name} must map replica ids to integers") from None


def _count(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ValueError(f"load report: {name} must be an integer")
    return int(value)
