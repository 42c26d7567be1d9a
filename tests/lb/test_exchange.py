"""An exchange's phases: every move of the table, and the proxy as the only writer."""

from __future__ import annotations

import ast
import asyncio
import itertools
from pathlib import Path
from time import perf_counter
from typing import cast

import pytest
import uvloop
from hypothesis import given
from hypothesis import strategies as st

import steadyserve.lb
from steadyserve.lb.exchange import (
    ALLOWED,
    ROUTED,
    Deadlines,
    Exchange,
    IllegalMove,
    Phase,
    step,
)

P = Phase

# Written out again, independently of the module's table: a move added to or
# dropped from ALLOWED must be a decision made in both places.
LEGAL = {
    (P.PARSING, P.READY),
    (P.PARSING, P.DONE),
    (P.READY, P.SENT),
    (P.READY, P.CONNECTING),
    (P.READY, P.WAITING),
    (P.READY, P.DONE),
    (P.WAITING, P.SENT),
    (P.WAITING, P.CONNECTING),
    (P.WAITING, P.DONE),
    (P.CONNECTING, P.SENT),
    (P.CONNECTING, P.READY),
    (P.CONNECTING, P.DONE),
    (P.SENT, P.DONE),
    (P.SENT, P.READY),
}


@pytest.mark.parametrize(("src", "dst"), list(itertools.product(Phase, Phase)))
def test_every_move(src: Phase, dst: Phase) -> None:
    if (src, dst) in LEGAL:
        assert step(src, dst) is dst
    else:
        with pytest.raises(IllegalMove, match=f"from {src.name} to {dst.name}"):
            step(src, dst)


def test_table_shape() -> None:
    assert set(ALLOWED) == set(Phase)
    # DONE is final, and every other phase can still end (no exchange gets stuck).
    assert ALLOWED[P.DONE] == frozenset()
    assert all(P.DONE in ALLOWED[p] for p in Phase if p is not P.DONE)
    # Every phase is reachable from PARSING.
    seen, todo = {P.PARSING}, [P.PARSING]
    while todo:
        for nxt in ALLOWED[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert seen == set(Phase)
    # The phases that hold something of a replica's are exactly those a move to
    # DONE from must undo: not PARSING/READY (nothing chosen yet), not DONE.
    assert frozenset({P.WAITING, P.CONNECTING, P.SENT}) == ROUTED


def state_writers(root: Path) -> list[str]:
    """Every assignment to an attribute named ``state`` under ``root`` outside
    proxy.py, except the constructor's in exchange.py, as ``file:line``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "proxy.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and (
                path.name == "exchange.py" and node.name == "__init__"
            ):
                node.body = []  # Exchange() starts in PARSING: construction, not a move
        for node in ast.walk(tree):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr == "state":
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_the_proxy_is_the_only_writer_of_a_phase() -> None:
    root = Path(steadyserve.lb.__file__).parent
    assert state_writers(root) == []


# -- Deadlines: request_timeout_s with one timer --------------------------------


class Stub:
    """Deadlines only hashes its keys: any object stands in for an Exchange."""


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add", "discard", "expire"]), st.integers(0, 7), st.floats(0, 50)
        ),
        max_size=60,
    )
)
def test_deadlines_expire_exactly_what_is_due(ops: list[tuple[str, int, float]]) -> None:
    """Against a plain model: every exchange added and not discarded is returned
    by the first ``expired(now)`` at or after its deadline, once, earliest first;
    ``earliest()`` is the minimum of those still pending."""
    exchanges = [Stub() for _ in range(8)]
    deadlines = Deadlines()
    model: dict[int, float] = {}
    now = 0.0
    for op, i, t in ops:
        ex = cast(Exchange, exchanges[i])
        if op == "add":
            deadlines.add(ex, now + t)
            model[i] = now + t
        elif op == "discard":
            deadlines.discard(ex)
            model.pop(i, None)
        else:
            now += t
            got = deadlines.expired(now)
            due = sorted((at, i) for i, at in model.items() if at <= now)
            assert {id(e) for e in got} == {id(exchanges[i]) for _, i in due}
            assert [model[exchanges.index(cast(Stub, e))] for e in got] == [at for at, _ in due]
            for _, i in due:
                del model[i]
        assert len(deadlines) == len(model)
        assert deadlines.earliest() == (min(model.values()) if model else None)


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_the_one_timer_never_expires_a_request_before_its_deadline(loop_kind: str) -> None:
    """The one timer fires on the loop's millisecond ticks (uvloop's clock is also
    truncated to the millisecond), but a request passes its deadline only once
    ``perf_counter()``, the clock its latency is measured on, reaches it: a 0.5 s
    stream was cut at 499.83 ms before (CI, tests/lb/test_outcomes.py)."""
    loop = uvloop.new_event_loop() if loop_kind == "uvloop" else asyncio.new_event_loop()
    deadlines = Deadlines()
    stubs = [cast(Exchange, Stub()) for _ in range(40)]
    late: list[float] = []  # how long after its deadline each request expired

    def due() -> None:
        deadlines.fired()
        now = perf_counter()
        for ex in deadlines.expired(now):
            late.append(now - due_at[id(ex)])
        earliest = deadlines.earliest()
        if earliest is not None:
            deadlines.arm(loop, earliest, due)
        elif len(late) == len(stubs):
            loop.stop()

    due_at: dict[int, float] = {}

    def add(i: int) -> None:
        at = perf_counter() + 0.003 + (i % 7) * 0.0007
        due_at[id(stubs[i])] = at
        deadlines.add(stubs[i], at)
        deadlines.arm(loop, at, due)

    for i in range(len(stubs)):
        loop.call_later(i * 0.0013, add, i)
    loop.call_later(10, loop.stop)  # bounded: the assertion below names a hang
    try:
        loop.run_forever()
    finally:
        loop.close()
    assert len(late) == len(stubs)
    assert min(late) >= 0
