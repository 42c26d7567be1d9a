"""The two ``steady status`` tables, column for column as SkyServe prints them."""

from __future__ import annotations

import json
import time
from typing import Any

from rich.table import Table

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


def _table(columns: tuple[str, ...]) -> Table:
    table = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), header_style="bold")
    for column in columns:
        table.add_column(column, no_wrap=True)
    return table


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
            svc["endpoint"],
        ]
        if verbose:
            autoscaling = svc.get("autoscaling") or {}
            row += [
                str(autoscaling.get("label", "-")),
                str(svc.get("load_balancing_policy", "-")),
            ]
        table.add_row(*row)
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


def replicas_table(services: list[dict[str, Any]]) -> Table:
    table = _table(REPLICA_COLUMNS)
    for svc in services:
        for rep in svc["replicas"]:
            table.add_row(
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


def events_table(events: list[dict[str, Any]]) -> Table:
    table = _table(("TIME", "REPLICA", "FROM", "TO", "WHY"))
    for event in events:
        stamp = time.strftime("%H:%M:%S", time.localtime(event["time"]))
        table.add_row(
            stamp,
            str(event["replica_id"] or "-"),
            event["from_status"] or "-",
            event["to_status"],
            event["reason"],
        )
    return table


def changes_table(changes: list[dict[str, Any]]) -> Table:
    table = _table(("FIELD", "CHANGE", "OLD", "NEW"))
    for change in changes:
        kind = "in place" if change["kind"] == "in_place" else "restart"
        table.add_row(change["path"], kind, _short(change["old"]), _short(change["new"]))
    return table


def history_table(versions: list[dict[str, Any]]) -> Table:
    table = _table(("VERSION", "CREATED", "MODE", "OUTCOME", "CHANGES"))
    for version in versions:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(version["created_at"]))
        table.add_row(
            str(version["version"]),
            stamp,
            version["mode"],
            (version["outcome"] or "-") + (", files pruned" if version.get("pruned") else ""),
            version["changes"],
        )
    return table


def _short(value: Any, limit: int = 40) -> str:
    text = "-" if value is None else json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 3] + "..."
