"""The load balancer's own answers (errors, and the gateway's model list), in the
shape the client expects.

An OpenAI client (the ``openai`` package, LangChain, vLLM's benchmark) reads an
error's ``{"error": {"message", "type", "code"}}`` and shows only "Error code: 503"
for a text/plain body; it retries a 503 after the ``Retry-After`` it is given. So on
OpenAI API paths (``/v1/...``) the load balancer answers in that shape, and a 503
that a moment's wait can cure (a full queue, no ready replica yet) carries
``Retry-After`` on every path, as RFC 9110 suggests. Off the hot path: only
requests the load balancer answers itself come here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

from steadyserve.lb.http import STATUS_LINES

OPENAI_PREFIX = b"/v1/"
MODELS_PATH = b"/v1/models"

# Seconds a client should wait before it retries, by the reason of a 503: a slot
# frees within moments; a replica takes longer to start (or to come back).
RETRY_AFTER: dict[str, int] = {
    "queue_full": 1,
    "websocket_full": 1,
    "no_replica": 5,
    "no_reachable_replica": 5,
    "no_pinned_replica": 5,
    "cold_start_timeout": 5,
}

UNKNOWN_MODEL = "unknown_model"


def target_of(line: bytes) -> bytes:
    """The request target of ``METHOD TARGET ...`` (a head, or what was received)."""
    first = line.find(b" ")
    if first < 0:
        return b""
    end = line.find(b" ", first + 1)
    return line[first + 1 : end if end > 0 else len(line)]


def is_openai(target: bytes) -> bool:
    return target.startswith(OPENAI_PREFIX)


def error_body(status: int, message: str, reason: str) -> dict[str, object]:
    """OpenAI's error object; ``code`` is the access log's stable reason word. An
    unknown model is answered word for word as vLLM does."""
    if reason == UNKNOWN_MODEL:
        kind: str = "NotFoundError"
        code: object = status
    else:
        kind = "invalid_request_error" if status < 500 else "server_error"
        code = reason
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def answer(
    status: int, message: str, reason: str | None, target: bytes, close: bool, head: bool = False
) -> bytes:
    """A whole response of the load balancer's own: JSON on OpenAI paths, else text.
    ``head``: the answer to a HEAD, which has no body (RFC 9110 9.3.2; its
    Content-Length says what a GET would get): a client reads a response to HEAD
    up to its head, so a body would be read as the next response."""
    if is_openai(target):
        body = json.dumps(error_body(status, message, reason or "error")).encode()
        kind = b"application/json"
    else:
        body = (message + "\n").encode()
        kind = b"text/plain; charset=utf-8"
    retry = RETRY_AFTER.get(reason or "") if status == 503 else None
    return _response(status, kind, body, close, retry, head)


def models_answer(names: Iterable[bytes], close: bool) -> bytes:
    """``GET /v1/models`` at the gateway: every served model name, in OpenAI's shape."""
    created = int(time.time())
    data = [
        {"id": _text(name), "object": "model", "created": created, "owned_by": "steadyserve"}
        for name in sorted(names)
    ]
    body = json.dumps({"object": "list", "data": data}).encode()
    return _response(200, b"application/json", body, close, None)


def ray_text(status: int, text: str, close: bool) -> bytes:
    """A text answer worded and typed as Ray Serve's proxy writes it (no newline
    added: Ray's ``/-/healthz`` body is exactly ``success``)."""
    return _response(status, b"text/plain; charset=utf-8", text.encode(), close, None)


def ray_json(value: object, close: bool) -> bytes:
    """A JSON answer as Ray Serve's proxy writes it (compact separators)."""
    body = json.dumps(value, separators=(",", ":")).encode()
    return _response(200, b"application/json", body, close, None)


def unknown_model_message(model: bytes) -> str:
    return f"The model `{_text(model)}` does not exist."


def _text(raw: bytes) -> str:
    """A model name as the JSON body spelled it (escapes undone where they parse)."""
    try:
        value = json.loads(b'"' + raw + b'"')
    except ValueError:
        return raw.decode("utf-8", "replace")
    return value if isinstance(value, str) else raw.decode("utf-8", "replace")


def _response(
    status: int, kind: bytes, body: bytes, close: bool, retry: int | None, head: bool = False
) -> bytes:
    return b"".join(
        (
            STATUS_LINES[status],
            b"content-type: %s\r\n" % kind,
            b"content-length: %d\r\n" % len(body),
            b"retry-after: %d\r\n" % retry if retry is not None else b"",
            b"connection: close\r\n" if close else b"",
            b"\r\n",
            b"" if head else body,
        )
    )
