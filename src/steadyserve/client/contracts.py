"""The ``--json`` output of each command: a stable contract for scripts.

One table here feeds both ``docs/cli.md`` and the schema tests in ``tests/cli``,
so the documented keys are the tested keys. The rule is the one of
``status --json``: keys are added, never removed or renamed. Every moment is
epoch seconds (``*_at``, ``time``) with an ISO-8601 UTC twin (``*_iso``).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, TypedDict

EPOCH_KEYS = (
    "launched_at",
    "created_at",
    "started_at",
    "finished_at",
    "time",
    "submitted_at",
    "ended_at",
)


def iso_utc(timestamp: float) -> str:
    """The ISO-8601 UTC string JSON output adds next to each epoch-seconds field."""
    moment = dt.datetime.fromtimestamp(timestamp, dt.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def with_iso(value: Any) -> Any:
    """A copy of ``value`` where every epoch field ``k`` also has ``k_iso`` (UTC)."""
    if isinstance(value, list):
        return [with_iso(item) for item in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        out[key] = with_iso(item)
        if key in EPOCH_KEYS and isinstance(item, int | float) and not isinstance(item, bool):
            out[f"{key}_iso"] = iso_utc(float(item))
        elif key in EPOCH_KEYS and item is None:
            out[f"{key}_iso"] = None
    return out


@dataclass(frozen=True)
class Shape:
    """The keys of one JSON object, and the nested objects under some of them
    (``name[]`` for a list of objects, ``name`` for one object or null)."""

    keys: tuple[str, ...]
    nested: tuple[tuple[str, Shape], ...] = ()

    @classmethod
    def of(cls, typed: Any, nested: tuple[tuple[str, Shape], ...] = ()) -> Shape:
        """The shape of a TypedDict below: its keys, in order (one source of truth)."""
        return cls(tuple(typed.__annotations__), nested)

    def describe(self, where: str = "") -> list[str]:
        """Markdown bullets: each object's path and its keys."""
        keys = ", ".join(f"`{key}`" for key in self.keys)
        lines = [f"- {f'`{where}`' if where else 'the object'}: {keys}"]
        for key, shape in self.nested:
            lines.extend(shape.describe(f"{where}.{key}" if where else key))
        return lines


# The typed contracts: what ``--json`` prints and what ``steadyserve.sdk`` returns.
# The shapes below (and so docs/cli.md and the schema tests) are read from these.


class Update(TypedDict):
    """A service's last update (``status --json``'s ``update``)."""

    mode: str
    from_version: int
    to_version: int
    status: str
    message: str
    started_at: float
    started_at_iso: str
    finished_at: float | None
    finished_at_iso: str | None


class Replica(TypedDict):
    id: int
    version: int
    status: str
    ip: str
    port: int | None
    pid: int | None
    launched_at: float
    launched_at_iso: str
    resources: str
    region: str
    reason: str | None
    assignment: dict[str, Any] | None
    pending_reason: str | None


class Event(TypedDict):
    """One state transition, of the service (``replica_id`` null) or a replica."""

    id: int
    service: str
    replica_id: int | None
    time: float
    time_iso: str
    from_status: str | None
    to_status: str
    reason: str


class Service(TypedDict):
    """One service of ``status --json``."""

    name: str
    status: str
    version: int
    active_versions: list[int]
    uptime_s: float | None
    endpoint: str
    ready_replicas: int
    total_replicas: int
    target_replicas: int
    update: Update | None
    load_balancer_pid: int | None
    replicas: list[Replica]
    canary: dict[str, Any] | None
    pool: dict[str, Any] | None


class Change(TypedDict):
    path: str
    old: Any
    new: Any
    kind: str
    why: str


class Plan(TypedDict):
    """What an update or rollback does (``update --json``); ``update`` is added by a wait."""

    name: str
    changed: bool
    version: int
    mode: str
    changes: list[Change]
    launch: int
    stop: int
    dry_run: bool


class HistoryVersion(TypedDict):
    version: int
    created_at: float
    created_at_iso: str
    mode: str
    changes: str
    outcome: str | None


class History(TypedDict):
    name: str
    down: bool
    versions: list[HistoryVersion]


class DeployItem(TypedDict):
    name: str
    action: str


class Deploy(TypedDict):
    dry_run: bool
    services: list[DeployItem]


class Created(TypedDict):
    name: str
    endpoint: str
    notice: str | None


class Down(TypedDict):
    down: list[str]
    purged: bool


class LogLine(TypedDict):
    source: str
    time: float | None
    time_iso: str | None
    line: str


class Job(TypedDict):
    """One job of a pool (``steady jobs queue --json``)."""

    id: int
    pool: str
    name: str
    status: str
    worker: int | None
    exit_code: int | None
    reason: str
    submitted_at: float
    submitted_at_iso: str
    started_at: float | None
    started_at_iso: str | None
    ended_at: float | None
    ended_at_iso: str | None
    log: str


class ControllerStatus(TypedDict):
    running: bool
    pid: int | None
    url: str | None


UPDATE = Shape.of(Update)
REPLICA = Shape.of(Replica)
EVENT = Shape.of(Event)
SERVICE = Shape.of(Service, (("update", UPDATE), ("replicas[]", REPLICA)))
CHANGE = Shape.of(Change)
PLAN = Shape.of(Plan, (("changes[]", CHANGE),))
HISTORY_VERSION = Shape.of(HistoryVersion)
DEPLOY_ITEM = Shape.of(DeployItem)
LOG_LINE = Shape.of(LogLine)
JOB = Shape.of(Job)


@dataclass(frozen=True)
class Contract:
    summary: str
    shape: Shape
    notes: str = ""


CONTRACTS: dict[str, Contract] = {
    "up": Contract(
        "One object: the service created.",
        Shape.of(Created),
        "`notice` is null, or why the endpoint is not on port 30001.",
    ),
    "status": Contract(
        "One object, `services`: a list (every service, or the ones named).",
        Shape(("services",), (("services[]", SERVICE),)),
        "With `--events`, each service also has `events[]`, its state transitions "
        "(newest last): " + ", ".join(f"`{k}`" for k in EVENT.keys) + ". `update` is the "
        "last update (null before the first), kept until the next one; its `status` "
        "is `IN_PROGRESS`, `SUCCEEDED`, `FAILED` or `ROLLED_BACK`. `canary` is null, or "
        "the canary update in flight: `step`, `steps`, `weight` (percent on the new "
        "version), `phase` (`RUNNING`, `WAITING` for promote, `PAUSED`, `COMPLETE`), "
        "`new_replicas_wanted`, `pause_left_s` during a timed pause, and `analysis` "
        "(`outcome`, `reason`) after the first check (docs/canary.md). When NAMES are "
        "given, `down` lists those that are down but kept their history (`name`, and "
        "`events` with `--events`).",
    ),
    "history": Contract(
        "One object: the service's `name`, whether it is `down` (history kept after "
        "`steady down`), and its `versions`, oldest first.",
        Shape.of(History, (("versions[]", HISTORY_VERSION),)),
        "`outcome` is null while a version is being rolled out.",
    ),
    "update": Contract(
        "One object: the plan (with `--dry-run`, what would happen).",
        PLAN,
        "`old`/`new` are the whole values (any JSON type; for `workdir`, the content "
        "hashes, and the change also has `files`: `added`, `removed` and `changed`, the "
        "first 20 paths of each, and their `counts`). `kind` is `in_place` or "
        "`restart`; `mode` is `in_place`, `rolling`, `blue_green`, `canary` or `none` (no change). "
        "With `--wait`, the object is printed when the update ends and has one more "
        "key, `update` (as in `status --json`); progress goes to stderr.",
    ),
    "rollback": Contract("The same object as `update --json`.", PLAN),
    "deploy": Contract(
        "One object: `dry_run` and `services`, one item per service of the file or taken down.",
        Shape.of(Deploy, (("services[]", DEPLOY_ITEM),)),
        "`action` is `create`, `update`, `none`, `down` (made by this file, no longer "
        "in it) or `keep` (not in the file, made with `steady up` or another file; "
        "with a `reason`); an `update` or `none` item also has every key of "
        "`update --json`, a `create` item those of `up --json`.",
    ),
    "logs": Contract(
        "JSON lines: one object per log line, as they are read.",
        LOG_LINE,
        "`time` is when `steady logs --follow` read the line (null for lines already "
        "in the file: see `--timestamps`). With `--access`, each object is a line of "
        "the service's request log as written, with its own keys (`time`, `ts`, "
        "`method`, `path`, `status`, `client`, `user_agent`, `request_id`, ...: "
        "docs/observability.md).",
    ),
    "down": Contract("One object: the services taken `down`.", Shape.of(Down)),
    "jobs pool status": Contract(
        "One object, `pools`: a list (every pool, or the ones named), each as a service "
        "of `status --json`.",
        Shape(("pools",), (("pools[]", SERVICE),)),
        "`pool` is the pool's `policy` (its `service.pool`), `pending_jobs`, and `jobs` "
        "(the job id each busy worker runs, by worker id); `replicas` are its workers.",
    ),
    "jobs queue": Contract(
        "One object, `jobs`: every job (of `--pool` only, when given), oldest first.",
        Shape(("jobs",), (("jobs[]", JOB),)),
        "`status` is `PENDING`, `STARTING`, `RUNNING`, `CANCELLING`, `SUCCEEDED`, "
        "`FAILED` or `CANCELLED`; `worker` is null until one is given; `log` is the "
        "job's log file (docs/pools.md).",
    ),
    "controller status": Contract(
        "One object. Exit code 1 when no controller runs.",
        Shape.of(ControllerStatus),
        "A running controller adds `home`, `epoch` and `started_at` (`started_at_iso`).",
    ),
}
