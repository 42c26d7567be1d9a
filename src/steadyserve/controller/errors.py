"""Errors the API turns into answers the CLI maps to exit codes (2 = bad input)."""

from __future__ import annotations


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
