"""``docs/cli.md``, generated from the click commands and the JSON contracts.

``python -m steadyserve.cli.docs > docs/cli.md`` rewrites it; a test fails when
the file and the commands disagree, so the reference never goes stale.
"""

from __future__ import annotations

import click

from steadyserve.cli.main import main
from steadyserve.client.contracts import CONTRACTS

INTRO = """\
# The `steady` command

Generated from the commands themselves: `python -m steadyserve.cli.docs > docs/cli.md`
(a test keeps it current). `steady COMMAND --help` prints the same text.

Exit codes: 0 success, 2 bad input (nothing changed), 1 any other failure. Bad
input is one line per mistake on stderr, `error: ` then the file, the field path
and what is wrong; a file with several mistakes gets them all at once.

Tables fit the terminal (piped: 200 columns, or `COLUMNS`): long cells wrap onto
more lines, no column is dropped. Times in tables are ISO-8601 with the zone,
local time (`--utc` for UTC); the date is left out for today.

## JSON output

Every command that prints facts takes `--json`. The JSON is a stable contract:
keys are added in later releases, never removed or renamed. Moments are epoch
seconds (`created_at`, `launched_at`, `started_at`, `finished_at`, `time`), each
with an ISO-8601 UTC twin named `<key>_iso` (`2026-11-30T21:43:05.123Z`). Each
command below lists its keys.

## Shell completion

`steady` completes commands and options in bash, zsh and fish (click's
completion). Add one line to your shell's startup file:

```console
eval "$(_STEADY_COMPLETE=bash_source steady)"    # ~/.bashrc
eval "$(_STEADY_COMPLETE=zsh_source steady)"     # ~/.zshrc
_STEADY_COMPLETE=fish_source steady | source     # ~/.config/fish/completions/steady.fish
```
"""


WIDTH = 80


def _contexts(
    group: click.Group, parent: click.Context
) -> list[tuple[str, click.Command, click.Context]]:
    found = []
    for name in sorted(group.commands):
        command = group.commands[name]
        ctx = click.Context(command, info_name=name, parent=parent, terminal_width=WIDTH)
        found.append((ctx.command_path.removeprefix("steady").strip(), command, ctx))
        if isinstance(command, click.Group):
            found.extend(_contexts(command, ctx))
    return found


def all_commands() -> list[tuple[str, click.Command, click.Context]]:
    """``steady`` and every command under it, with its path (``controller status``)
    and a context as click builds it (so ``-h`` and widths are those of the CLI)."""
    root = click.Context(main, info_name="steady", terminal_width=WIDTH, **main.context_settings)
    return [("", main, root), *_contexts(main, root)]


def _section(path: str, command: click.Command, ctx: click.Context) -> list[str]:
    title = f"steady {path}".strip()
    lines = [f"## {title}", "", "```text", command.get_help(ctx), "```", ""]
    contract = CONTRACTS.get(path)
    if contract is not None:
        lines += [f"**`--json`**: {contract.summary} Keys:", ""]
        lines += contract.shape.describe()
        lines += [""]
        if contract.notes:
            lines += [contract.notes, ""]
    return lines


def render() -> str:
    lines = [INTRO]
    for path, command, ctx in all_commands():
        lines += _section(path, command, ctx)
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    click.echo(render(), nl=False)
