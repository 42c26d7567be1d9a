"""prefix_affinity and session_affinity through a real load balancer process: the
key is read from the buffered request, a request without one is still served,
and a replica that leaves the table hands its keys to the others."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from _lb_helpers import FakeController, LBProcess, Upstream, request, upstreams, wait_for

from steadyserve.core.routing.options import PolicyOptions
from steadyserve.wire.routes import options_to_json

Fleet = tuple[FakeController, LBProcess, list[Upstream]]


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Fleet]:
    home = tmp_path_factory.mktemp("home")
    with upstreams(3) as ups, FakeController(home) as ctl, LBProcess(home) as lb:
        yield ctl, lb, ups


def use(ctl: FakeController, ups: list[Upstream], policy: str, **options: object) -> None:
    extra = {"policy_options": options_to_json(PolicyOptions(**options))}  # type: ignore[arg-type]
    key = ctl.set_table([(i + 1, u.port) for i, u in enumerate(ups)], policy=policy, extra=extra)
    wait_for(lambda: key in ctl.polls, what="LB has the table")


def served_by(
    lb: LBProcess, body: bytes | None = None, headers: dict[str, str] | None = None
) -> str:
    status, _, data = request(lb.port, "POST", "/echo", body=body or b"{}", headers=headers)
    assert status == 200, data
    name: str = json.loads(data)["upstream"]
    return name


def chat(system: str, *turns: str) -> bytes:
    messages = [{"role": "system", "content": system}]
    messages += [{"role": "user", "content": t} for t in turns]
    return json.dumps({"model": "m", "messages": messages, "max_tokens": 16}).encode()


def test_prefix_affinity_keeps_a_conversation_and_spreads_new_prompts(fleet: Fleet) -> None:
    ctl, lb, ups = fleet
    use(ctl, ups, "prefix_affinity")
    history: list[str] = []
    owners = set()
    for turn in range(6):
        history.append(f"question {turn} " * 20)
        owners.add(served_by(lb, chat("You are helpful. " * 200, *history)))
    assert len(owners) == 1
    # Sequential requests with unseen prompts go to the least loaded (ties rotate).
    spread = {served_by(lb, chat(f"system prompt number {i} " * 100)) for i in range(6)}
    assert len(spread) == 3
    # Not JSON, or no prompt: routed like least_load, never refused.
    assert served_by(lb, b"\xff\x00 not json") in {u.name for u in ups}
    assert served_by(lb, b'{"input": "x"}') in {u.name for u in ups}
    assert "question" not in lb.log()  # prompts never logged


@pytest.mark.parametrize(
    ("affinity_key", "how"),
    [
        ("header:X-Session-ID", lambda s: ({"X-Session-ID": s}, b"{}")),
        ("cookie:sid", lambda s: ({"Cookie": f"a=1; sid={s}"}, b"{}")),
        ("json:/user", lambda s: ({}, json.dumps({"user": s, "prompt": "hi"}).encode())),
    ],
)
def test_session_affinity_sticks_and_a_leaving_replica_hands_its_sessions_on(
    fleet: Fleet, affinity_key: str, how: object
) -> None:
    ctl, lb, ups = fleet
    use(ctl, ups, "session_affinity", affinity_key=affinity_key)
    sessions = [f"session-{i}" for i in range(12)]
    owner = {}
    for s in sessions:
        headers, body = how(s)  # type: ignore[operator]
        seen = {served_by(lb, body, headers) for _ in range(3)}
        assert len(seen) == 1, (s, seen)
        owner[s] = seen.pop()
    assert len(set(owner.values())) >= 2  # sessions spread over the ring
    # One replica leaves (drained): its sessions move, the others' stay put.
    leaving = owner[sessions[0]]
    rest = [u for u in ups if u.name != leaving]
    key = ctl.set_table(
        [(ups.index(u) + 1, u.port) for u in rest],
        policy="session_affinity",
        extra={"policy_options": options_to_json(PolicyOptions(affinity_key=affinity_key))},
    )
    wait_for(lambda: key in ctl.polls, what="LB has the smaller table")
    for s in sessions:
        headers, body = how(s)  # type: ignore[operator]
        now = served_by(lb, body, headers)
        assert now != leaving
        if owner[s] != leaving:
            assert now == owner[s]
    assert "session-" not in lb.log()  # keys never logged


def test_a_multiplexed_service_routes_a_model_to_the_replica_reporting_it(fleet: Fleet) -> None:
    ctl, lb, ups = fleet
    replicas = [
        {"id": i + 1, "version": 1, "host": "127.0.0.1", "port": u.port} for i, u in enumerate(ups)
    ]
    replicas[2]["models"] = ["lora-7"]  # replica 3 reports it holds lora-7
    key = ctl.set_table(
        [(i + 1, u.port) for i, u in enumerate(ups)],
        extra={"replicas": replicas, "multiplexed": True},
    )
    wait_for(lambda: key in ctl.polls, what="LB has the table")
    header = {"serve_multiplexed_model_id": "lora-7"}
    assert {served_by(lb, headers=header) for _ in range(6)} == {ups[2].name}
    # A model nobody holds goes least loaded (ties rotate), then sticks where it went.
    first = served_by(lb, headers={"serve_multiplexed_model_id": "new"})
    assert {served_by(lb, headers={"serve_multiplexed_model_id": "new"}) for _ in range(4)} == {
        first
    }
    # Without the header: the policy alone, spread over every replica.
    assert {served_by(lb) for _ in range(6)} == {u.name for u in ups}
    # The same table without the flag: the header is not read.
    use(ctl, ups, "least_load")
    assert len({served_by(lb, headers=header) for _ in range(6)}) == 3
