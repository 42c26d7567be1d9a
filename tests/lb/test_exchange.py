"""An exchange's phases: every move of the table, and the proxy as the only writer."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

import steadyserve.lb
from steadyserve.lb.exchange import (
    ALLOWED,
    CLOCK_SLACK,
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
            due = sorted((at, i) for i, at in model.items() if at <= now + CLOCK_SLACK)
            assert {id(e) for e in got} == {id(exchanges[i]) for _, i in due}
            assert [model[exchanges.index(cast(Stub, e))] for e in got] == [at for at, _ in due]
            for _, i in due:
                del model[i]
        assert len(deadlines) == len(model)
        assert deadlines.earliest() == (min(model.values()) if model else None)
