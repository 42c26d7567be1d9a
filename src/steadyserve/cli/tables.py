"""The ``steady`` tables: ``status`` column for column as SkyServe prints them,
plus events, history and update plans.

A table never drops or truncates a column to fit the screen. Left alone, rich
measures a cell's narrowest width as its longest word, and when the words do not
fit it cuts columns off; here every cell can fold (``overflow="fold"``) down to
its header's width, so rich narrows the widest columns first (the reasons, the
changes) and the rest keep their width: nothing wraps when the screen is wide
enough, and no header is ever cut.
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import time
from dataclasses import dataclass
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from steadyserve.envs.workdir_diff import describe as workdir_describe

SERVICE_COLUMNS = ("NAME", "VERSION", "UPTIME", "STATUS", "REPLICAS", "ENDPOINT")
REPLICA_COLUMNS = (
    "SERVICE_NAME",
    "ID",
    "VERSION",
    "IP",
    "LAUNCHED",
    "RESOURCES",
    "STATUS",
    "REGION",
)
EVENT_COLUMNS = ("TIME", "REPLICA", "FROM", "TO", "WHY")
HISTORY_COLUMNS = ("VERSION", "CREATED", "MODE", "OUTCOME", "CHANGES")
CHANGE_COLUMNS = ("FIELD", "CHANGE", "OLD", "NEW")

FAILED_UPDATES = ("FAILED", "ROLLED_BACK")


def format_uptime(seconds: float) -> str:
    """``10m 4s`` style, as SkyServe's UPTIME."""
    seconds = int(max(0, seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{days}d"] if days else []
    if hours or days:
        parts.append(f"{hours}h")
    if minutes or hours or days:
        parts.append(f"{minutes}m")
    parts.append(f"{secs}s")
    return " ".join(parts)


def format_ago(timestamp: float, now: float | None = None) -> str:
    """``10 mins ago`` style, as SkyServe's LAUNCHED."""
    delta = int(max(0, (now if now is not None else time.time()) - timestamp))
    for size, unit in ((86400, "day"), (3600, "hr"), (60, "min"), (1, "sec")):
        if delta >= size or size == 1:
            count = delta // size
            return f"{count} {unit}{'' if count == 1 else 's'} ago"
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Clock:
    """How tables show a moment: local time with its offset, or UTC (``--utc``).

    ISO-8601 always carries the zone (``21:43:05+09:00``; ``Z`` for UTC); the
    date is left out only for moments of today, in the zone shown.
    """

    utc: bool = False
    now: float | None = None

    def _at(self, timestamp: float) -> dt.datetime:
        moment = dt.datetime.fromtimestamp(timestamp, dt.timezone.utc)
        return moment if self.utc else moment.astimezone()

    def format(self, timestamp: float, millis: bool = False) -> str:
        moment = self._at(timestamp)
        today = self._at(self.now if self.now is not None else time.time()).date()
        spec = "milliseconds" if millis else "seconds"
        text = moment.isoformat(timespec=spec).replace("+00:00", "Z")
        return text.split("T", 1)[1] if moment.date() == today else text


WHOLE_WORD_MAX = 24
"""Words up to this long are never cut (every state name, a version, a time);
longer ones (a hash, a long path or URL) may fold so the table still fits."""


class Folding:
    """A cell that may wrap between words to any width but never narrower than its
    longest word (up to ``WHOLE_WORD_MAX``): ``SHUTTING_DOWN`` stays whole at 80
    columns, where folding anywhere made ``SHUTTING_DO`` / ``WN``."""

    def __init__(self, text: str | Text) -> None:
        self.text = text if isinstance(text, Text) else Text(text)
        self.text.overflow = "fold"

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.text

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widest = Measurement.get(console, options, self.text).maximum
        word = max((len(w) for w in self.text.plain.split()), default=1)
        return Measurement(min(max(word, 1), WHOLE_WORD_MAX, widest), widest)


def _table(columns: tuple[str, ...]) -> Table:
    table = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), header_style="bold")
    for column in columns:
        table.add_column(column, min_width=len(column), overflow="fold")
    return table


def fit(table: Table, console: Console) -> Table:
    """Two spaces between columns, or one when two would make some word fold (a
    table whose words cannot fit even then folds the widest cells, as before)."""
    unbounded = console.options.update_width(1 << 16)  # measured unclamped
    if Measurement.get(console, unbounded, table).minimum > console.width:
        table.padding = (0, 1, 0, 0)
    return table


def _row(table: Table, *cells: str | Text) -> None:
    table.add_row(*(Folding(cell) for cell in cells))


VERBOSE_COLUMNS = ("AUTOSCALING_POLICY", "LOAD_BALANCING_POLICY")


def services_table(services: list[dict[str, Any]], verbose: bool = False) -> Table:
    table = _table(SERVICE_COLUMNS + (VERBOSE_COLUMNS if verbose else ()))
    for svc in services:
        versions = ",".join(str(v) for v in svc["active_versions"]) or str(svc["version"])
        row = [
            svc["name"],
            versions,
            format_uptime(svc["uptime_s"]),
            svc["status"],
            f"{svc['ready_replicas']}/{svc['total_replicas']}",
            svc["endpoint"] if svc.get("pool") is None else "-",  # a pool has none
        ]
        if verbose:
            autoscaling = svc.get("autoscaling") or {}
            row += [
                str(autoscaling.get("label", "-")),
                str(svc.get("load_balancing_policy", "-")),
            ]
        _row(table, *row)
    return table


def autoscaling_lines(services: list[dict[str, Any]]) -> list[str]:
    """One line per autoscaled service: its target, its policy and the latest judgement."""
    lines = []
    for svc in services:
        autoscaling = svc.get("autoscaling") or {}
        if autoscaling.get("policy") in (None, "fixed"):
            continue
        lines.append(
            f"{svc['name']}: target {svc['target_replicas']} replicas"
            f" ({autoscaling['label']}); {autoscaling.get('last_decision') or 'no decision yet'}"
        )
    return lines


def update_notes(services: list[dict[str, Any]]) -> list[str]:
    """One line per service whose last update failed or was rolled back, printed
    under the services table. It stays until the next update, so ``steady status``
    alone tells why a service still runs its old version."""
    notes = []
    for svc in services:
        update = svc.get("update")
        if not update or update.get("status") not in FAILED_UPDATES:
            continue
        notes.append(
            f"{svc['name']}: update to version {update['to_version']} {update['status']}: "
            f"{update.get('message') or 'no reason recorded'}"
        )
    return notes


def replicas_table(services: list[dict[str, Any]]) -> Table:
    table = _table(REPLICA_COLUMNS)
    for svc in services:
        for rep in svc["replicas"]:
            _row(
                table,
                svc["name"],
                str(rep["id"]),
                str(rep["version"]),
                rep["ip"],
                format_ago(rep["launched_at"]),
                rep["resources"],
                rep["status"],
                rep["region"],
            )
    return table


def events_table(events: list[dict[str, Any]], clock: Clock | None = None) -> Table:
    clock = clock or Clock()
    table = _table(EVENT_COLUMNS)
    for event in events:
        _row(
            table,
            clock.format(event["time"]),
            str(event["replica_id"] or "-"),
            event["from_status"] or "-",
            event["to_status"],
            event["reason"],
        )
    return table


def changes_table(changes: list[dict[str, Any]]) -> Table:
    """Every changed field with its whole old and new value; a structured value
    (a mapping or list) shows as YAML-ish JSON lines, the changed ones marked."""
    table = _table(CHANGE_COLUMNS)
    for change in changes:
        kind = "in place" if change["kind"] == "in_place" else "restart"
        if change.get("files"):  # a workdir: its files, not two content hashes
            removed, added = workdir_describe(change["files"])
            _row(table, change["path"], kind, "\n".join(removed) or "-", "\n".join(added) or "-")
            continue
        old, new = shown_pair(change["old"], change["new"])
        _row(table, change["path"], kind, old, new)
    return table


def history_table(versions: list[dict[str, Any]], clock: Clock | None = None) -> Table:
    clock = clock or Clock()
    table = _table(HISTORY_COLUMNS)
    for version in versions:
        _row(
            table,
            str(version["version"]),
            clock.format(version["created_at"]),
            version["mode"],
            (version["outcome"] or "-") + (", files pruned" if version.get("pruned") else ""),
            version["changes"],
        )
    return table


def _text(value: Any) -> str:
    return "-" if value is None else value if isinstance(value, str) else json.dumps(value)


def shown_pair(old: Any, new: Any) -> tuple[Text, Text]:
    """Old and new value in full. Scalars as they are; mappings and lists one key
    per line, with ``-``/``+`` on the lines that differ, as a diff would."""
    if not isinstance(old, dict | list) and not isinstance(new, dict | list):
        return Text(_text(old)), Text(_text(new))
    old_lines = _lines(old)
    new_lines = _lines(new)
    matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
    old_text, new_text = Text(), Text()
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        for line in old_lines[i1:i2]:
            same = tag == "equal"
            old_text.append(("  " if same else "- ") + line + "\n", "" if same else "red")
        for line in new_lines[j1:j2]:
            same = tag == "equal"
            new_text.append(("  " if same else "+ ") + line + "\n", "" if same else "green")
    old_text.rstrip()
    new_text.rstrip()
    return old_text, new_text


def _lines(value: Any) -> list[str]:
    if value is None:
        return ["-"]
    if isinstance(value, dict):
        return [f"{key}: {json.dumps(item)}" for key, item in value.items()] or ["{}"]
    if isinstance(value, list):
        return [json.dumps(item) for item in value] or ["[]"]
    return [_text(value)]
