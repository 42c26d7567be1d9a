"""Help text: every command and option says what it does, every command shows an
example, every command that prints facts has --json, and docs/cli.md is current."""

from __future__ import annotations

import click

from steadyserve.cli.docs import all_commands, render
from steadyserve.client.contracts import CONTRACTS
from tests.helpers.steady import REPO

FACT_COMMANDS = {
    "up",
    "status",
    "history",
    "update",
    "rollback",
    "deploy",
    "logs",
    "down",
    "controller status",
    "jobs pool status",
    "jobs queue",
}


def test_every_command_and_option_has_a_description_and_an_example() -> None:
    for path, command, ctx in all_commands():
        assert command.help and command.help.strip(), f"steady {path} has no help"
        assert "Example:" in command.get_help(ctx), f"steady {path} has no example"
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, f"steady {path} {param.opts[0]} has no help line"


def test_every_command_with_facts_has_json_and_a_documented_contract() -> None:
    with_json = {
        path
        for path, command, _ in all_commands()
        if any("--json" in getattr(p, "opts", []) for p in command.params)
    }
    assert with_json == FACT_COMMANDS == set(CONTRACTS)


def test_docs_cli_md_is_current() -> None:
    current = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert current == render(), "run: python -m steadyserve.cli.docs > docs/cli.md"
