"""The controller's pure rules: the table of replica moves, the probe rules, the
store's typed boundary. No event loop, no I/O beyond a temporary SQLite file."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steadyserve.controller.probing import FAILED_PROBES_TO_REPLACE, judge_probe
from steadyserve.core.states import (
    REPLICA_MOVES,
    EventKind,
    IllegalMove,
    ReplicaStatus,
    ServiceStatus,
    UpdateMode,
    UpdateStatus,
    VersionOutcome,
    check_move,
    update_event,
)
from steadyserve.store import ReplicaRow, ServiceRow, Store, UpdateRow, VersionRow

# ------------------------------------------------------------- the table of moves


def test_every_replica_state_has_a_row_and_failed_states_are_final() -> None:
    assert set(REPLICA_MOVES) == set(ReplicaStatus)
    for status in ReplicaStatus:
        if status.is_failed:
            # The one move out of a failed state: the cause turns out to be a lost node.
            assert REPLICA_MOVES[status] <= {ReplicaStatus.PREEMPTED}
    assert REPLICA_MOVES[ReplicaStatus.PREEMPTED] == frozenset()


def test_no_move_leads_back_to_pending_or_provisioning_from_a_started_replica() -> None:
    started = [ReplicaStatus.STARTING, ReplicaStatus.READY, ReplicaStatus.NOT_READY]
    for status in started:
        for earlier in (ReplicaStatus.PENDING, ReplicaStatus.PROVISIONING):
            with pytest.raises(IllegalMove):
                check_move(status, earlier)


def test_the_moves_the_controller_makes_are_allowed() -> None:
    path = [
        ReplicaStatus.PENDING,
        ReplicaStatus.PROVISIONING,
        ReplicaStatus.STARTING,
        ReplicaStatus.READY,
        ReplicaStatus.NOT_READY,
        ReplicaStatus.READY,
        ReplicaStatus.SHUTTING_DOWN,
    ]
    for old, new in itertools.pairwise(path):
        check_move(old, new)
    check_move(ReplicaStatus.STARTING, ReplicaStatus.FAILED_INITIAL_DELAY)
    check_move(ReplicaStatus.NOT_READY, ReplicaStatus.FAILED_PROBING)
    with pytest.raises(IllegalMove):
        check_move(ReplicaStatus.FAILED, ReplicaStatus.READY)
    with pytest.raises(IllegalMove):
        check_move(ReplicaStatus.STARTING, ReplicaStatus.FAILED_PROBING)


def test_update_events_are_named_after_the_status() -> None:
    assert update_event(UpdateStatus.SUCCEEDED) is EventKind.UPDATE_SUCCEEDED
    assert update_event(UpdateStatus.FAILED) is EventKind.UPDATE_FAILED
    assert f"{ReplicaStatus.READY}" == str(ReplicaStatus.READY) == "READY"


# ------------------------------------------------------------- the probe rules


def test_a_passing_probe_makes_a_starting_or_not_ready_replica_ready() -> None:
    for status in (ReplicaStatus.STARTING, ReplicaStatus.NOT_READY):
        verdict = judge_probe(
            status, True, "", failed_probes=2, running_for_s=0, initial_delay_s=10
        )
        assert verdict.status is ReplicaStatus.READY and verdict.failed_probes == 0


def test_a_starting_replica_fails_only_past_its_initial_delay_and_judges_its_version() -> None:
    kwargs = {"failed_probes": 0, "initial_delay_s": 10.0}
    within = judge_probe(ReplicaStatus.STARTING, False, "refused", running_for_s=9.9, **kwargs)
    assert within.status is None and within.failed_probes == 0
    past = judge_probe(ReplicaStatus.STARTING, False, "refused", running_for_s=10.1, **kwargs)
    assert past.status is ReplicaStatus.FAILED_INITIAL_DELAY and past.judge_version
    assert "initial_delay_seconds=10.0: refused" in past.reason


def test_a_ready_replica_turns_not_ready_then_is_replaced_after_three_failures() -> None:
    status, failed = ReplicaStatus.READY, 0
    seen = []
    for _ in range(FAILED_PROBES_TO_REPLACE):
        verdict = judge_probe(
            status, False, "503", failed_probes=failed, running_for_s=99, initial_delay_s=1
        )
        failed = verdict.failed_probes
        status = verdict.status or status
        seen.append(status)
    assert seen == [
        ReplicaStatus.NOT_READY,
        ReplicaStatus.NOT_READY,
        ReplicaStatus.FAILED_PROBING,
    ]
    assert not verdict.judge_version  # it served once: its version is not broken


@given(
    results=st.lists(st.booleans(), min_size=1, max_size=30),
    start=st.sampled_from([ReplicaStatus.READY, ReplicaStatus.NOT_READY]),
)
def test_only_three_failures_in_a_row_replace_a_serving_replica(
    results: list[bool], start: ReplicaStatus
) -> None:
    status, failed, run = start, 0, 0
    for ok in results:
        verdict = judge_probe(
            status, ok, "x", failed_probes=failed, running_for_s=99, initial_delay_s=1
        )
        run = 0 if ok else run + 1
        failed = verdict.failed_probes
        assert failed == run
        if verdict.status is ReplicaStatus.FAILED_PROBING:
            assert run == FAILED_PROBES_TO_REPLACE
            return
        status = verdict.status or status
        assert status is (ReplicaStatus.READY if ok else status)
    assert run < FAILED_PROBES_TO_REPLACE


# ------------------------------------------------------------- the store boundary


def test_rows_come_back_from_the_store_as_enums(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    now = time.time()
    store.add_service(
        ServiceRow("svc", ServiceStatus.CONTROLLER_INIT, 1, now, 30001),
        VersionRow("svc", 1, now, "{}", "", outcome=VersionOutcome.ACTIVE),
    )
    store.add_replica(ReplicaRow("svc", 1, 1, ReplicaStatus.PENDING, now), "launch")
    store.add_update(
        UpdateRow(None, "svc", UpdateMode.ROLLING, 1, 2, UpdateStatus.IN_PROGRESS, "", now)
    )
    try:
        service = store.service("svc")
        assert service is not None and service.status is ServiceStatus.CONTROLLER_INIT
        (replica,) = store.replicas("svc")
        assert replica.status is ReplicaStatus.PENDING
        (version,) = store.versions("svc")
        assert version.outcome is VersionOutcome.ACTIVE and version.mode is UpdateMode.INITIAL
        update = store.latest_update("svc")
        assert update is not None
        assert update.status is UpdateStatus.IN_PROGRESS and update.mode is UpdateMode.ROLLING
        store.remove_replica(replica, "gone")
        assert [e.to_status for e in store.events("svc")][-1] == "STOPPED"
    finally:
        store.close()
