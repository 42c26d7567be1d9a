"""SkyServe keys this project does not act on, each refused with what it was in
SkyServe and what to write here instead (rather than "unknown field", which
would read as a typo in a file that works on SkyServe).

Keyed by the field's path in a service document, list indexes left out. The
keys SkyServe's service schema has and this project handles are in the spec
models; docs/skyserve.md has the whole table, both kinds.
"""

from __future__ import annotations

REFUSED: dict[str, str] = {
    "service.load_balancer.stream_timeout_seconds": (
        "SkyServe's limit on a streamed response's silence; here"
        " service.request_timeout_s cuts a replica's answer off after that many seconds"
        " (off by default): use it, or remove the key"
    ),
    "service.readiness_probe.endpoint_probe_interval_seconds": (
        "SkyServe's time between probes of a replica; write service.health_check_period_s instead"
    ),
    "service.readiness_probe.consecutive_failure_threshold_timeout": (
        "SkyServe's time a READY replica may fail its probes before it is replaced;"
        " here one failed probe takes a replica out of routing and the process's exit"
        " replaces it: remove the key"
    ),
    "service.workers": ("SkyPilot's size of a pool; write pool: {workers: N} (docs/pools.md)"),
}


def refusal(loc: list[int | str]) -> str | None:
    """The line for a refused SkyServe key at ``loc``, or None."""
    return REFUSED.get(".".join(part for part in loc if isinstance(part, str)))
