"""The replica helpers work against their narrow port alone (controller/port.py):
re-adoption and a probe's verdict, carried out on a recording object that has only
the port's members, not a ServiceRuntime."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from steadyserve.backends.base import AdoptRequest, ReplicaHandle
from steadyserve.controller.port import HeldReplica, ReplicaTask
from steadyserve.controller.probing import apply_probe, probe_loop
from steadyserve.controller.readopt import readopt
from steadyserve.core.states import ReplicaStatus
from steadyserve.spec import ServiceSpec, parse_service
from steadyserve.store import ReplicaRow


class Handle:
    pid = 41


class Backend:
    """Finds again only the processes it is told are alive."""

    def __init__(self, alive: set[int]) -> None:
        self.alive = alive

    def adopt(self, request: AdoptRequest) -> ReplicaHandle | None:
        return Handle() if request.pid in self.alive else None  # type: ignore[return-value]


class Port:
    """Only what readopt.AdoptPort and probing.ProbePort name; every call is recorded."""

    def __init__(self, spec: ServiceSpec, rows: list[ReplicaRow], alive: set[int]) -> None:
        self.name = "svc"
        self.store: Any = None  # the helpers under test write only through the port
        self.clock: Any = type("Clock", (), {"wall": staticmethod(lambda: 100.0)})()
        self.replicas = {r.id: r for r in rows}
        self.backend = Backend(alive)
        self.prober: Any = None
        self.environment: Any = None
        self.port_watch: Any = None
        self._spec = spec
        self._held: dict[int, HeldReplica] = {}
        self.calls: list[tuple[Any, ...]] = []

    @property
    def spec(self) -> ServiceSpec:
        return self._spec

    def spec_for(self, version: int) -> ServiceSpec:
        return self._spec

    def hold(self, replica_id: int) -> HeldReplica:
        return self._held.setdefault(replica_id, HeldReplica())

    def spawn(self, replica: ReplicaRow, coro: ReplicaTask) -> None:
        self.calls.append(("spawn", replica.id, coro.__name__))
        coro.close()

    def transition(
        self, replica: ReplicaRow, new: ReplicaStatus, reason: str, **values: Any
    ) -> None:
        self.calls.append(("transition", replica.id, new))
        replica.status = new

    def mark_failed(self, replica: ReplicaRow, status: ReplicaStatus, reason: str) -> None:
        self.calls.append(("failed", replica.id, status, reason))

    def judge_version(self, version: int) -> None:
        self.calls.append(("judge", version))

    def version_served(self, version: int) -> None:
        self.calls.append(("served", version))

    def publish_now(self) -> None:
        self.calls.append(("publish",))

    def wake(self) -> None:
        self.calls.append(("wake",))

    async def learn_models(self, replica: ReplicaRow) -> None:
        self.calls.append(("models", replica.id))

    async def deliver_user_config(
        self, replica: ReplicaRow, *, replace_on_refusal: bool = False
    ) -> tuple[bool, str]:
        return True, ""

    async def retire(self, replica: ReplicaRow, reason: str) -> None:
        pass

    async def stop_failed(self, replica: ReplicaRow, handle: ReplicaHandle) -> None:
        pass


def _row(rid: int, status: ReplicaStatus, pid: int | None) -> ReplicaRow:
    return ReplicaRow(
        service="svc",
        id=rid,
        version=1,
        status=status,
        launched_at=50.0,
        pid=pid,
        ip="127.0.0.1",
        port=9000 + rid if pid else None,
    )


def _spec(tmp_path: Path) -> ServiceSpec:
    return parse_service({"name": "svc", "run": "serve"}, base_dir=tmp_path)


def test_readopt_resumes_probing_drains_and_fails_the_lost_through_its_port(
    tmp_path: Path,
) -> None:
    rows = [
        _row(1, ReplicaStatus.READY, 11),
        _row(2, ReplicaStatus.SHUTTING_DOWN, 12),
        _row(3, ReplicaStatus.READY, 13),  # its process is gone
        _row(4, ReplicaStatus.FAILED, 14),  # failed; its stop did not finish
    ]
    port = Port(_spec(tmp_path), rows, alive={11, 12, 14})
    readopt(port)
    assert port.calls == [
        ("spawn", 1, "probe_loop"),
        ("spawn", 2, "retire"),
        ("failed", 3, ReplicaStatus.FAILED, "gone while the controller was down"),
        ("spawn", 4, "stop_failed"),
    ]
    assert port.hold(1).started_at == 50.0


def test_a_passing_probe_makes_the_replica_ready_and_its_version_served(tmp_path: Path) -> None:
    row = _row(1, ReplicaStatus.STARTING, 11)
    port = Port(_spec(tmp_path), [row], alive={11})
    apply_probe(port, row, True, "")
    assert port.calls == [("transition", 1, ReplicaStatus.READY), ("served", 1), ("wake",)]


def test_three_failed_probes_fail_a_ready_replica_through_mark_failed(tmp_path: Path) -> None:
    row = _row(1, ReplicaStatus.READY, 11)
    port = Port(_spec(tmp_path), [row], alive={11})

    async def three() -> None:
        for _ in range(3):
            apply_probe(port, row, False, "answered 503")

    asyncio.run(three())
    failed = [c for c in port.calls if c[0] == "failed"]
    assert failed == [
        ("failed", 1, ReplicaStatus.FAILED_PROBING, "3 probes failed in a row: answered 503")
    ]


class _Stop(Exception):
    """Ends probe_loop at its first sleep."""


@pytest.mark.parametrize("control_port", [9500, None])
def test_a_python_replica_reports_its_models_before_it_turns_ready(
    tmp_path: Path, control_port: int | None
) -> None:
    """The route table that first lists a Python replica says whether it is
    multiplexed: its ``/-/info`` is read between the passing probe and READY (a
    command replica has no ``/-/info``)."""
    row = _row(1, ReplicaStatus.STARTING, 11)
    row.control_port = control_port
    port = Port(_spec(tmp_path), [row], alive={11})

    async def prober(ip: str, at: int, probe: Any) -> tuple[bool, str]:
        port.calls.append(("probe", at))
        return True, ""

    async def sleep(seconds: float) -> None:
        raise _Stop

    port.prober = prober
    port.environment = type("Env", (), {"control_headers": staticmethod(lambda r: {})})()
    port.clock = type(
        "Clock", (), {"wall": staticmethod(lambda: 100.0), "sleep": staticmethod(sleep)}
    )()
    with pytest.raises(_Stop):
        asyncio.run(probe_loop(port, row))
    learned = [("models", 1)] if control_port is not None else []
    assert port.calls == [
        ("probe", control_port or 9001),
        *learned,
        ("transition", 1, ReplicaStatus.READY),
        ("served", 1),
        ("wake",),
    ]
