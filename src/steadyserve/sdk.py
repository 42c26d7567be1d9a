"""SteadyServe from Python: ``up``, ``update``, ``status``, ``down`` and the rest.

The calls SkyPilot users script as ``sky.serve.up(task, service_name)``, made
against this home's controller (started when none runs, as any ``steady``
command does). Each returns the typed contract of ``steadyserve.client.contracts``,
the very objects ``steady ... --json`` prints, ``*_iso`` twins included. A failure
raises ``SteadyError(message, exit_code)``: the line and the exit code the CLI
would print and exit with (2 bad input, nothing changed; 1 anything else).

    from steadyserve import sdk
    created = sdk.up("examples/http_server/service.yaml", "web", wait=True)
    plan = sdk.update("web", "service.yaml", mode="blue_green", wait=True)
    sdk.down("web")

Nothing here prints: waiting is a quiet poll, progress is for the CLI.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from steadyserve.client.connection import Client, CommandError
from steadyserve.client.contracts import (
    Created,
    Deploy,
    Down,
    Event,
    History,
    Plan,
    Service,
    Update,
    with_iso,
)
from steadyserve.core.strategies import selectable_modes
from steadyserve.home.paths import Home
from steadyserve.spec import SpecError

__all__ = [
    "SteadyError",
    "deploy",
    "down",
    "events",
    "history",
    "rollback",
    "status",
    "up",
    "update",
    "wait_ready",
]

POLL_S = 0.2


class SteadyError(Exception):
    """A SteadyServe failure: ``message`` (one line) and the CLI's ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    """The CLI's errors, as SteadyError (a file's several mistakes joined by '; ')."""
    try:
        yield
    except SpecError as exc:
        raise SteadyError("; ".join(exc.lines()), 2) from None
    except CommandError as exc:
        raise SteadyError(str(exc), exc.exit_code) from None


def _client(home: str | os.PathLike[str] | None) -> Client:
    return Client(Home.from_env(home))


def _names(names: str | list[str] | tuple[str, ...] | None) -> list[str]:
    if names is None:
        return []
    return [names] if isinstance(names, str) else list(names)


def _service(client: Client, name: str) -> dict[str, Any]:
    found = client.call("GET", f"/api/v1/services?name={name}")["services"]
    return cast(dict[str, Any], found[0])


def up(
    task: str | os.PathLike[str],
    service_name: str | None = None,
    *,
    wait: bool = False,
    timeout: float = 600.0,
    ignore_resources: bool = False,
    ignore_image: bool = False,
    home: str | os.PathLike[str] | None = None,
) -> Created:
    """Start a service from the file ``task`` (``steady up FILE -n NAME [--wait]``)."""
    from steadyserve.client.python_defaults import raw_document
    from steadyserve.client.service_files import load_one
    from steadyserve.compat.file_mounts import staged
    from steadyserve.compat.skyserve import unique_name

    file = Path(task)
    with _errors():
        spec = load_one(file, service_name, [], ignore_resources, ignore_image)
        client = _client(home)
        if service_name is None and not (raw_document(file) or {}).get("name"):
            taken = {s["name"] for s in client.call("GET", "/api/v1/services")["services"]}
            if spec.name in taken:
                spec = spec.model_copy(update={"name": unique_name(taken)})
        with staged(spec, file) as sent:
            created = client.call(
                "POST",
                "/api/v1/services",
                {
                    "spec": sent.spec_json(),
                    "yaml": file.read_text(encoding="utf-8"),
                    "file": str(file.resolve()),
                },
            )
        if wait:
            _wait_ready(client, created["name"], timeout)
    return cast(Created, with_iso({"notice": None, **created}))


def update(
    service_name: str,
    task: str | os.PathLike[str],
    *,
    mode: str | None = None,
    dry_run: bool = False,
    wait: bool = False,
    timeout: float = 900.0,
    ignore_resources: bool = False,
    ignore_image: bool = False,
    home: str | os.PathLike[str] | None = None,
) -> Plan:
    """Update a service to the file ``task`` as a new version (``steady update``).

    ``mode`` is ``rolling``, ``blue_green`` or ``canary`` (default: the file's
    ``service.update_mode``); with ``wait`` the plan has ``update``, its outcome, and
    a failed update raises SteadyError (exit code 1).
    """
    from steadyserve.client.service_files import load_one
    from steadyserve.compat.file_mounts import staged

    modes = selectable_modes()
    if mode is not None and mode not in modes:
        raise SteadyError(f"mode: must be one of {', '.join(modes)}, not {mode!r}", 2)
    file = Path(task)
    with _errors():
        spec = load_one(file, service_name, [], ignore_resources, ignore_image)
        client = _client(home)
        with staged(spec, file) as sent:
            result = client.call(
                "POST",
                f"/api/v1/services/{service_name}/update",
                {
                    "spec": sent.spec_json(),
                    "yaml": file.read_text(encoding="utf-8"),
                    "file": str(file.resolve()),
                    "mode": mode,
                    "dry_run": dry_run,
                },
            )
        return _after_plan(client, result, wait, timeout)


def rollback(
    service_name: str,
    *,
    to: int | None = None,
    dry_run: bool = False,
    wait: bool = False,
    timeout: float = 900.0,
    home: str | os.PathLike[str] | None = None,
) -> Plan:
    """Go back to version ``to``'s spec (default: the one before) as a new version."""
    with _errors():
        client = _client(home)
        result = client.call(
            "POST", f"/api/v1/services/{service_name}/rollback", {"to": to, "dry_run": dry_run}
        )
        return _after_plan(client, result, wait, timeout)


def deploy(
    file: str | os.PathLike[str],
    *,
    dry_run: bool = False,
    prune_all: bool = False,
    wait: bool = False,
    timeout: float = 900.0,
    home: str | os.PathLike[str] | None = None,
) -> Deploy:
    """Make a fleet file (``services: [...]``) or a Ray Serve config the whole desired
    state (``steady deploy FILE -y``: services it made and no longer lists go down)."""
    from steadyserve.client.deploy_files import deploy_request

    with _errors():
        client = _client(home)
        with deploy_request(Path(file), prune_all, []) as (request, _plan):
            if not dry_run:
                preview = client.call("POST", "/api/v1/deploy", request, timeout=600.0)
                removals = [i["name"] for i in preview["services"] if i["action"] == "down"]
                request = {**request, "dry_run": False, "expect_down": removals}
            result = client.call("POST", "/api/v1/deploy", request, timeout=600.0)
        for item in result["services"] if wait and not dry_run else []:
            if item["action"] == "create":
                _wait_ready(client, item["name"], timeout)
            elif item["action"] == "update":
                item["update"] = _wait_update(client, item["name"], item["version"], timeout)
    return cast(Deploy, with_iso(result))


def status(
    service_names: str | list[str] | tuple[str, ...] | None = None,
    *,
    home: str | os.PathLike[str] | None = None,
) -> list[Service]:
    """Every running service, or the ones named (``steady status --json``'s list)."""
    names = _names(service_names)
    query = "&".join(f"name={n}" for n in names)
    with _errors():
        services = _client(home).call("GET", f"/api/v1/services?{query}")["services"]
    return cast(list[Service], with_iso(services))


def events(service_name: str, *, home: str | os.PathLike[str] | None = None) -> list[Event]:
    """A service's state transitions, newest last (also after it was taken down)."""
    with _errors():
        found = _client(home).call("GET", f"/api/v1/services/{service_name}/events")
    return cast(list[Event], with_iso(found["events"]))


def history(service_name: str, *, home: str | os.PathLike[str] | None = None) -> History:
    """A service's versions, oldest first, and whether it is down."""
    with _errors():
        found = _client(home).call("GET", f"/api/v1/services/{service_name}/history")
    return cast(
        History,
        with_iso({"name": service_name, "down": found["down"], "versions": found["versions"]}),
    )


def down(
    service_names: str | list[str] | tuple[str, ...] | None = None,
    *,
    all: bool = False,
    purge: bool = False,
    home: str | os.PathLike[str] | None = None,
) -> Down:
    """Take services down (``all=True``: every one); ``purge`` also forgets their history."""
    names = _names(service_names)
    if bool(names) == all:
        raise SteadyError("name services to take down, or pass all=True (not both)", 2)
    with _errors():
        client = _client(home)
        known = [s["name"] for s in client.call("GET", "/api/v1/services")["services"]]
        for name in names if not purge else []:
            if name not in known and client.call("GET", f"/api/v1/services/{name}/history")["down"]:
                raise CommandError(f"{name} is already down (purge=True forgets its history)", 2)
        taken = known if all else names
        for name in taken:
            client.call("DELETE", f"/api/v1/services/{name}?purge={int(purge)}", timeout=600.0)
    return {"down": taken, "purged": purge}


def wait_ready(
    service_name: str, timeout: float = 600.0, *, home: str | os.PathLike[str] | None = None
) -> Service:
    """Wait until every replica is READY (or the service is at zero on purpose);
    SteadyError when it FAILED or ``timeout`` seconds passed."""
    with _errors():
        return cast(Service, with_iso(_wait_ready(_client(home), service_name, timeout)))


def _wait_ready(client: Client, name: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        svc = _service(client, name)
        ready, target = svc["ready_replicas"], svc["target_replicas"]
        if svc["status"] == "READY" and ready >= target:
            return svc
        if svc["status"] == "NO_REPLICA" and target == 0:
            return svc
        if svc["status"] == "FAILED":
            raise CommandError(f"{name} FAILED; see sdk.events({name!r})")
        if time.monotonic() > deadline:
            raise CommandError(f"{name} not ready after {timeout:.0f}s ({svc['status']})")
        time.sleep(POLL_S)


def _wait_update(client: Client, name: str, version: int, timeout: float) -> Update:
    deadline = time.monotonic() + timeout
    while True:
        update = _service(client, name).get("update") or {}
        if update.get("to_version") == version and update.get("status") != "IN_PROGRESS":
            break
        if update.get("to_version", version) != version:
            raise CommandError(f"{name}: update to version {version} was superseded")
        if time.monotonic() > deadline:
            raise CommandError(f"{name}: update not done after {timeout:.0f}s")
        time.sleep(POLL_S)
    if update["status"] != "SUCCEEDED":
        raise CommandError(f"{name}: update {update['status']}: {update['message']}")
    return cast(Update, update)


def _after_plan(client: Client, result: dict[str, Any], wait: bool, timeout: float) -> Plan:
    if wait and result["changed"] and not result["dry_run"]:
        result["update"] = _wait_update(client, result["name"], result["version"], timeout)
    return cast(Plan, with_iso(result))
