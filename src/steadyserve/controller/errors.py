"""Errors the API turns into answers the CLI maps to exit codes (2 = bad input)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web


class ApiError(Exception):
    status = 500
    kind = "internal"


class BadInput(ApiError):
    status = 400
    kind = "bad_input"


class NotFound(ApiError):
    status = 404
    kind = "not_found"


class Conflict(ApiError):
    status = 409
    kind = "conflict"


PREFIX_TAKEN = "route_prefix "
"""How the message of a deploy refused for a route prefix another service holds
starts: ``serve.run`` raises Ray's RayServeException for it, as Ray does."""


async def json_object(request: web.Request) -> dict[str, Any]:
    """A request's body as a JSON object, or BadInput saying what it is not."""
    try:
        data = await request.json()
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInput("request body is not JSON") from exc
    if not isinstance(data, dict):
        raise BadInput("request body must be a JSON object")
    return data
