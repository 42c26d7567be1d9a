"""``steady promote|pause|resume|abort NAME``: the API of progressive delivery.

A canary update takes all four (controller/rollout/canary.py). A rolling or blue-green
update takes ``pause`` (no replica is launched or drained, routing stays as it
is, the update deadline stops counting), ``resume`` and ``abort``, which rolls
it back at once (the last good version is the target again; the new replicas
drain). ``promote`` of such an update, or anything of an in-place one, is
refused with one line that says why, exit 2 at the CLI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from steadyserve.controller.errors import BadInput
from steadyserve.core.strategies import strategy_of

if TYPE_CHECKING:
    from steadyserve.controller.daemon import Controller
    from steadyserve.controller.runtime import ServiceRuntime

ACTIONS = ("promote", "pause", "resume", "abort")


def carry_out(runtime: ServiceRuntime, action: str, full: bool = False) -> str:
    """Apply ``action`` to the update in flight; the message for the user."""
    update = runtime.rollout.update
    if update is None or not runtime.updating:
        raise BadInput(f"{runtime.name}: no update in progress (nothing to {action})")
    strategy = strategy_of(update.mode)
    if strategy.steps:  # its own step machine takes every command
        return runtime.canary.command("promote_full" if action == "promote" and full else action)
    kind = update.mode.replace("_", "-")
    if not strategy.holds:
        raise BadInput(f"{runtime.name}: {action} does not apply to an {kind} update")
    if action == "abort":
        runtime.rollout.roll_back("aborted by steady abort")
        return f"{kind} update to version {update.to_version} aborted; rolling back"
    if action == "promote" and strategy.promotes:
        return runtime.rollout.blue_green.promote()
    if action == "promote":
        raise BadInput(
            f"{runtime.name}: promote applies to canary updates "
            f"(this {kind} update goes on by itself; steady pause holds it)"
        )
    holds = runtime.rollout.holds
    held = holds.held()
    if action == "pause":
        if held:
            raise BadInput(f"{runtime.name}: the {kind} update is already paused")
        holds.set_held(True)
        return f"{kind} update paused: no replica launched or drained until steady resume"
    if not held:
        raise BadInput(f"{runtime.name}: the {kind} update is not paused")
    holds.set_held(False)
    return f"{kind} update resumed"


def add_routes(routes: web.RouteTableDef, controller: Controller) -> None:
    """POST /api/v1/services/NAME/{promote,pause,resume,abort} (``{"full": bool}``)."""

    def handler(action: str) -> object:
        async def handle(request: web.Request) -> web.Response:
            runtime = controller.runtime(request.match_info["name"])
            full = False
            if request.can_read_body:
                try:
                    data = await request.json()
                except ValueError as exc:
                    raise BadInput("request body is not JSON") from exc
                full = bool(isinstance(data, dict) and data.get("full"))
            message = carry_out(runtime, action, full)
            return web.json_response({"name": runtime.name, "message": message})

        return handle

    for action in ACTIONS:
        routes.post(f"/api/v1/services/{{name}}/{action}")(handler(action))  # type: ignore[arg-type]
