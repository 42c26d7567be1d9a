"""Custom autoscaling policy functions (Ray's ``policy_function``) run in a real
subprocess, one second a call; an error or a timeout keeps the target and says why."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from steadyserve.controller.autoscaler import Autoscaler
from steadyserve.core.autoscale import OngoingPolicy

POLICY = """
import json, os, time

def scale(ctx):
    with open("calls.jsonl", "a") as out:
        out.write(json.dumps({"pid": os.getpid(), "requests": ctx.total_num_requests,
                              "current": ctx.current_num_replicas,
                              "target": ctx.target_num_replicas,
                              "max": ctx.config.max_replicas,
                              "state": ctx.policy_state}) + "\\n")
    print("a policy may print; it does not break the answers")
    calls = ctx.policy_state.get("calls", 0) + 1
    return 4 if ctx.total_num_requests > 0 else 1, {"calls": calls}

def broken(ctx):
    raise RuntimeError("no metrics today")

def slow(ctx):
    time.sleep(5)
    return 3
"""


def scaler(workdir: Path, function: str, events: list[str]) -> Autoscaler:
    (workdir / "mypolicy.py").write_text(POLICY)
    policy = OngoingPolicy(
        min_replicas=1,
        max_replicas=5,
        target_ongoing_requests=1,
        look_back_period_s=5,
        upscale_delay_s=0,
        policy_function=f"mypolicy:{function}",
    )
    return Autoscaler(policy, running=1, record=events.append, policy_workdir=lambda: workdir)


def step_until(scaler: Autoscaler, done: Callable[[], bool], seconds: float = 15.0) -> None:
    """Tick as the controller does (a load report, a step) until ``done``."""
    deadline = time.monotonic() + seconds
    now = 0.0
    while time.monotonic() < deadline:
        now += 0.2
        scaler.load.lb_report(now, {1: 3}, {1: 0}, lb_pid=1)
        scaler.step(now, serving=1, running_ids=[1])
        if done():
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached")


@pytest.fixture
def events() -> list[str]:
    return []


def test_the_policy_runs_in_its_own_process_with_rays_context(
    tmp_path: Path, events: list[str]
) -> None:
    autoscaler = scaler(tmp_path, "scale", events)
    try:
        step_until(autoscaler, lambda: autoscaler.target() == 4)
        # Its count goes through Ray's bounds and delays (0 here): 4 of at most 5.
        assert events == ["ongoing 3.0 over 5 s / target 1 -> 4 replicas"]
        step_until(
            autoscaler, lambda: len((tmp_path / "calls.jsonl").read_text().splitlines()) >= 3
        )
        calls = [
            json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().split("\n") if line
        ]
        assert {c["pid"] for c in calls} != {os.getpid()} and len({c["pid"] for c in calls}) == 1
        assert calls[0]["requests"] == 3 and calls[0]["current"] == 1 and calls[0]["max"] == 5
        assert calls[0]["state"] == {} and calls[-1]["state"]["calls"] >= 1  # state comes back
    finally:
        autoscaler.close()


def test_an_error_keeps_the_target_and_an_event_says_why(tmp_path: Path, events: list[str]) -> None:
    autoscaler = scaler(tmp_path, "broken", events)
    try:
        step_until(autoscaler, lambda: bool(events))
        assert events == [
            "custom policy: mypolicy:broken RuntimeError: no metrics today; keeping 1 replicas"
        ]
        assert autoscaler.target() == 1
    finally:
        autoscaler.close()


def test_a_call_over_one_second_is_stopped_and_the_target_kept(
    tmp_path: Path, events: list[str]
) -> None:
    autoscaler = scaler(tmp_path, "slow", events)
    try:
        started = time.monotonic()
        step_until(autoscaler, lambda: bool(events))
        assert time.monotonic() - started < 4  # stopped at 1 s, not after the 5 s sleep
        assert events == [
            "custom policy: mypolicy:slow took longer than 1 s; stopped it; keeping 1 replicas"
        ]
        assert autoscaler.target() == 1
    finally:
        autoscaler.close()


def test_a_module_missing_from_the_workdir_is_an_error_event(
    tmp_path: Path, events: list[str]
) -> None:
    autoscaler = scaler(tmp_path, "scale", events)
    autoscaler.set_policy(
        OngoingPolicy(min_replicas=1, max_replicas=5, policy_function="nothere:scale")
    )
    try:
        step_until(autoscaler, lambda: bool(events))
        assert events[0].startswith("custom policy: cannot import nothere:scale:")
        assert "ModuleNotFoundError" in events[0]
    finally:
        autoscaler.close()
