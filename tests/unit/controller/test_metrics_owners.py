"""``/metrics`` forgets a service's counters when the service goes, also when a
service of the same name is made again between two scrapes (down --purge, up):
the new service starts from zero, it does not inherit the old one's requests."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from steadyserve.controller.clock import SYSTEM_CLOCK
from steadyserve.controller.metrics import Observer


def _report(requests: int, pid: int) -> dict[str, Any]:
    return {"lb_pid": pid, "metrics": {"requests": {"1 1 GET 2": requests}}}


def _requests(observer: Observer) -> dict[str, int]:
    return {
        name: sum(sum(e.counts()["requests"].values()) for e in t.entries.values())
        for name, t in observer.live().items()
    }


def test_a_name_made_again_starts_from_zero() -> None:
    first, second = object(), object()
    controller = SimpleNamespace(services={"web": first}, clock=SYSTEM_CLOCK)
    observer = Observer(controller)  # type: ignore[arg-type]
    observer.ingest("web", _report(500, pid=11))
    assert _requests(observer) == {"web": 500}

    controller.services = {"web": second}  # purged and made again, before any scrape
    assert _requests(observer) == {}
    observer.ingest("web", _report(3, pid=12))
    assert _requests(observer) == {"web": 3}  # not 503: the old LB's counts are gone


def test_a_report_after_the_service_went_is_not_kept() -> None:
    controller = SimpleNamespace(services={}, clock=SYSTEM_CLOCK)
    observer = Observer(controller)  # type: ignore[arg-type]
    observer.ingest("gone", _report(7, pid=13))  # a draining LB's last report
    assert observer.traffic == {} and _requests(observer) == {}
