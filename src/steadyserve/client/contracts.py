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
    draining: dict[str, Any] | None
    in_flight: int


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
    endpoint: str | None
    """``127.0.0.1:PORT``; None for a pool, which has no endpoint."""
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
    notes: list[str]


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
    recoveries: int
    restarts_on_errors: int
    job_recovery: dict[str, Any]
    log: str


class Cancelled(TypedDict):
    id: int
    message: str


class PoolApplied(TypedDict):
    name: str
    action: str
    version: int
    changed: bool


class ControllerStatus(TypedDict):
    running: bool
    pid: int | None
    url: str | None


class Steered(TypedDict):
    """``steady promote|pause|resume|abort --json``."""

    name: str
    action: str
    message: str


class Dashboard(TypedDict):
    url: str


class ControllerStopped(TypedDict):
    stopped: bool


class ControllerExit(TypedDict):
    exit_code: int


class Restored(TypedDict):
    restored: bool
    source: str | None
    message: str


class Unit(TypedDict):
    unit: str
    output: str | None


class Launched(TypedDict):
    ids: list[int]
    pool: str


class JobLine(TypedDict):
    job: int
    line: str


class Progress(TypedDict):
    """One JSON line of ``--wait`` under ``--json``, before the command's object."""

    progress: str
    name: str


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
CREATED = Shape.of(Created)
DOWN = Shape.of(Down)
STATUS = Shape(("services",), (("services[]", SERVICE),))
DEPLOY = Shape.of(Deploy, (("services[]", DEPLOY_ITEM),))
STEERED = Shape.of(Steered)
WAIT_NOTE = (
    " With `--wait`, JSON lines: one progress object per change"
    f" ({', '.join(f'`{k}`' for k in Shape.of(Progress).keys)}, and the counts), then"
    " this object as the last line."
)
JOBS = Shape(("jobs",), (("jobs[]", JOB),))


@dataclass(frozen=True)
class Contract:
    summary: str
    shape: Shape
    notes: str = ""


CONTRACTS: dict[str, Contract] = {
    "up": Contract(
        "One object: the service created.",
        CREATED,
        "`notice` is null, or why the endpoint is not on the first endpoint port"
        " (30001, or the first of `STEADY_PORTS`): another process holds it. `notes`"
        " are what was also said on stderr (a name chosen, a name's earlier history"
        " forgotten)." + WAIT_NOTE,
    ),
    "status": Contract(
        "One object, `services`: a list (every service, or the ones named).",
        STATUS,
        "With `--events`, each service also has `events[]`, its state transitions "
        "(newest last): " + ", ".join(f"`{k}`" for k in EVENT.keys) + ". `update` is the "
        "last update (null before the first), kept until the next one; its `status` "
        "is `IN_PROGRESS`, `SUCCEEDED`, `FAILED` or `ROLLED_BACK`. `canary` is null, or "
        "the canary update in flight: `step`, `steps`, `weight` (percent on the new "
        "version), `phase` (`RUNNING`, `WAITING` for promote, `PAUSED`, `COMPLETE`), "
        "`new_replicas_wanted`, `pause_left_s` during a timed pause, and `analysis` "
        "(`outcome`, `reason`) after the first check (docs/canary.md). When NAMES are "
        "given, `down` lists those that are down but kept their history (`name`, and "
        "`events` with `--events`). A replica's `draining` is null, or while it drains "
        "(SHUTTING_DOWN): `in_flight` (requests the load balancer still has on it), "
        "`waited_s` and `limit_s` (`service.drain_timeout_s`).",
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
        "With `--wait`, JSON lines: one progress object per change (`progress`, `name`, "
        "`version`, `ready`, `target`, `older_ready`, `routing`), then this object, when "
        "the update ends, with one more key, `update` (as in `status --json`).",
    ),
    "rollback": Contract("The same object as `update --json`.", PLAN),
    "deploy": Contract(
        "One object: `dry_run` and `services`, one item per service of the file or taken down.",
        DEPLOY,
        "`action` is `create`, `update`, `none`, `down` (made by this file, no longer "
        "in it) or `keep` (not in the file, made with `steady up` or another file; "
        "with a `reason`); an `update` or `none` item also has every key of "
        "`update --json`, a `create` item those of `up --json`." + WAIT_NOTE,
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
    "down": Contract("One object: the services taken `down`.", DOWN),
    "jobs pool status": Contract(
        "One object, `pools`: a list (every pool, or the ones named), each as a service "
        "of `status --json`.",
        Shape(("pools",), (("pools[]", SERVICE),)),
        "`pool` is the pool's `policy` (its `service.pool`), `pending_jobs`, and `jobs` "
        "(the job id each busy worker runs, by worker id); `replicas` are its workers.",
    ),
    "jobs queue": Contract(
        "One object, `jobs`: every job (of `--pool` only, when given; not ended only, "
        "with `-s`; in the states of `--status` only, when given), oldest first.",
        JOBS,
        "`status` is `PENDING`, `STARTING`, `RUNNING`, `RECOVERING`, `CANCELLING`, "
        "`SUCCEEDED`, `FAILED` or `CANCELLED`; `worker` is null until one is given; "
        "`recoveries` counts its runs after the first, `restarts_on_errors` its failures "
        "judged against `job_recovery`'s `max_restarts_on_errors` (SkyPilot's count: "
        "the refused restart too, never a code of `recover_on_exit_codes`); "
        "`job_recovery` has `strategy`, `max_restarts_on_errors`, `recover_on_exit_codes`; "
        "`log` is the job's log file (docs/pools.md).",
    ),
    "jobs launch": Contract(
        "One object, `jobs`: the jobs submitted, as `jobs queue --json` shows them.",
        JOBS,
        "With `--json` the command never follows the job's log.",
    ),
    "jobs logs": Contract(
        "JSON lines: one object per line of the job's log, as `logs --json` prints them.",
        LOG_LINE,
        "`source` is `job ID`; `time` is null.",
    ),
    "jobs cancel": Contract(
        "One object, `cancelled`: a list, one item per job asked to stop.",
        Shape(("cancelled",), (("cancelled[]", Shape.of(Cancelled)),)),
        "`message` says whether it ended at once (it had not started, or was "
        "recovering) or is being stopped.",
    ),
    "jobs pool apply": Contract(
        "One object: the pool's `name`, the `action` (`create`, `update` or `resize`), "
        "its `version` and whether it `changed`.",
        Shape.of(PoolApplied),
    ),
    "jobs pool down": Contract("One object: the pools taken `down`.", Shape.of(Down)),
    "jobs pool logs": Contract(
        "JSON lines, as `logs --json` prints them: a worker's (its setup's output first) "
        "or the controller's.",
        LOG_LINE,
    ),
    "controller status": Contract(
        "One object. Exit code 1 when no controller runs.",
        Shape.of(ControllerStatus),
        "A running controller adds `home`, `epoch`, `started_at` (`started_at_iso`),"
        " `backend`, and `ports`: its `STEADY_PORTS` range, or null.",
    ),
    "controller start": Contract(
        "One object: the running controller, as `controller status --json`.",
        Shape.of(ControllerStatus),
    ),
    "controller stop": Contract(
        "One object: whether a controller was `stopped` (false: none ran).",
        Shape.of(ControllerStopped),
    ),
    "controller run": Contract(
        "One line when the controller exits: its `exit_code` (the log is on stderr).",
        Shape.of(ControllerExit),
    ),
    "controller restore": Contract(
        "One object: the `source` put in as state.db (null: begun empty) and the `message`.",
        Shape.of(Restored),
    ),
    "controller install-unit": Contract(
        "One object: the `unit` text, and the file it was written to (`output`, or null).",
        Shape.of(Unit),
    ),
    "dashboard": Contract(
        "One object: the one-time `url` (no browser is opened).", Shape.of(Dashboard)
    ),
    "promote": Contract("One object: what the controller did.", STEERED),
    "pause": Contract("One object: what the controller did.", STEERED),
    "resume": Contract("One object: what the controller did.", STEERED),
    "abort": Contract("One object: what the controller did.", STEERED),
    "serve up": Contract("The same object as `up --json`.", CREATED),
    "serve status": Contract("The same object as `status --json`.", STATUS),
    "serve update": Contract("The same object as `update --json`.", PLAN),
    "serve logs": Contract("JSON lines, as `logs --json`.", LOG_LINE),
    "serve down": Contract("The same object as `down --json`.", DOWN),
    "ray run": Contract("JSON lines, as `deploy --json --wait`; the last one its object.", DEPLOY),
    "ray deploy": Contract("The same object as `deploy --json`.", DEPLOY),
    "ray status": Contract(
        "One object: Ray's `serve status` layout, as `status --format ray --json`"
        " (with `--name`, that application only).",
        Shape(("applications", "target_capacity")),
    ),
    "ray shutdown": Contract("One object: the `applications` deleted.", Shape(("applications",))),
    "ray build": Contract(
        "One object: the `config` and the file it was written to (`output_path`, or null).",
        Shape(("config", "output_path")),
    ),
    "ray config": Contract(
        "One object: `applications`, each as `serve config` prints it.", Shape(("applications",))
    ),
}
