"""``steady jobs cancel`` and ``jobs pool down`` ask as SkyPilot's do: a piped
answer is read as click's prompt reads it (``yes | sky jobs cancel 3`` works in
SkyPilot), Enter is yes, and with nothing to read and no -y the command is
refused in one line, exit 2."""

from __future__ import annotations

import io

import click
import pytest

from steadyserve.cli.pool_commands import confirm
from steadyserve.client.connection import CommandError

QUESTION = "Cancelling managed job with ID 3. Proceed?"


@pytest.mark.parametrize("piped", ["y\n", "yes\n", "Y\n", "\n", "maybe\ny\n"])
def test_a_piped_yes_proceeds(piped: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(piped))
    confirm(QUESTION, yes=False)


@pytest.mark.parametrize("piped", ["n\n", "no\n", "maybe\nn\n"])
def test_a_piped_no_aborts(piped: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(piped))
    with pytest.raises(click.Abort):
        confirm(QUESTION, yes=False)


@pytest.mark.parametrize("piped", ["", "maybe\n"])
def test_no_answer_to_read_is_refused_in_one_line(
    piped: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(piped))
    with pytest.raises(CommandError) as refused:
        confirm(QUESTION, yes=False)
    assert refused.value.exit_code == 2
    assert str(refused.value) == (
        "Cancelling managed job with ID 3: pass -y to confirm (no terminal to ask on)"
    )


def test_yes_asks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    confirm(QUESTION, yes=True)
