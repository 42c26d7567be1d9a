"""What a request-aware policy reads from a request: its prompt or its affinity key.

A policy names what it needs (``Policy.request_key``: ``prompt``, or one of
``header:NAME``, ``cookie:NAME``, ``json:/pointer``); the proxy asks for it only
when the policy in force names something, once per request, when it first
chooses a replica. By then the body is buffered (up to the first 64 KiB,
downstream.py's REQUEST_BUFFER_BYTES), so nothing waits for it. Everything here
is tolerant: a body that is not JSON, is cut at 64 KiB, or has no such field
gives None, and the policy routes that request like least_load. Keys are turned
into hashes by the policies and never logged.

Whatever a client sends, reading its key can only fail into "no key": a body
outside :func:`parse_bounded`'s limits (size, nesting) is not parsed at all, a
string with a lone surrogate still hashes (its UTF-8 with ``surrogatepass``), and
``read_key`` turns any other failure into None.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from steadyserve.core.routing.options import PolicyOptions
from steadyserve.core.routing.prefix import PROMPT_KEY, chain
from steadyserve.lb.exchange import UNREAD

if TYPE_CHECKING:
    from steadyserve.lb.exchange import Exchange

log = logging.getLogger("steadyserve.lb")

MAX_JSON_BYTES = 64 * 1024
"""The largest body a ``json:`` key is parsed from: what the LB buffers anyway."""
MAX_JSON_DEPTH = 64
"""Deeper bodies are not parsed: real request bodies nest a few levels, and
30,000 ``[`` would otherwise reach the parser's recursion limit."""
MAX_JSON_MARKS = 8192
"""Bodies with more brackets and quotes than this (outside escapes) and more than
:data:`MAX_JSON_DEPTH` brackets are not parsed either: that bounds the depth
check's own work (a chat needs about ten a message)."""
_SQUARE = bytes.maketrans(b"{}", b"[]")
_NOT_MARKS = bytes(b for b in range(256) if b not in b'"[]{}')

Extractor = Callable[[bytes, bytes], object]
"""``(head, body) -> key``: the head as the LB forwards it, the buffered body."""

# The first top-level-looking key holding the prompt: a chat's message list or a
# completion's prompt. A JSON string cannot contain a bare quote, so these bytes
# only ever match a key.
_PROMPT_FIELD = re.compile(rb'"(messages|prompt)"\s*:\s*')


def prompt_bytes(body: bytes) -> bytes | None:
    """The raw JSON bytes from the prompt's value to the end of what was buffered.

    Not parsed: a multi-turn history is often longer than the 64 KiB the LB
    holds, and its beginning is what a prefix cache matches on. Fields after the
    prompt only change its last block."""
    found = _PROMPT_FIELD.search(body)
    if found is None:
        return None
    rest = body[found.end() :]
    return rest if rest[:1] in (b"[", b'"') else None


def dechunk(data: bytes) -> bytes:
    """The payload of a chunked body, as far as it is whole (tolerant)."""
    out: list[bytes] = []
    pos = 0
    while True:
        end = data.find(b"\r\n", pos)
        if end < 0:
            break
        try:
            size = int(data[pos:end].split(b";", 1)[0], 16)
        except ValueError:
            break
        if size == 0:
            break
        out.append(data[end + 2 : end + 2 + size])
        pos = end + 2 + size + 2
    return b"".join(out)


def header_value(head: bytes, name: bytes) -> bytes | None:
    """The first value of header ``name`` (lowercase) in a request head."""
    lower = head.lower()
    at = lower.find(b"\r\n" + name + b":")
    if at < 0:
        return None
    start = at + len(name) + 3
    end = head.find(b"\r\n", start)
    value = head[start : end if end >= 0 else len(head)].strip()
    return value or None


def cookie_value(head: bytes, name: bytes) -> bytes | None:
    cookies = header_value(head, b"cookie")
    if cookies is None:
        return None
    for part in cookies.split(b";"):
        key, sep, value = part.strip().partition(b"=")
        if sep and key == name:
            return value.strip(b'"') or None
    return None


def json_pointer(document: Any, pointer: str) -> Any:
    """RFC 6901: ``/a/0/b``; ``~1`` is ``/`` and ``~0`` is ``~``. KeyError if absent."""
    if pointer == "":
        return document
    for token in pointer[1:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(document, dict):
            document = document[token]
        elif isinstance(document, list) and token.isdigit():
            document = document[int(token)]
        else:
            raise KeyError(token)
    return document


def parse_bounded(body: bytes) -> bool:
    """Is ``body`` within what the LB parses: at most :data:`MAX_JSON_BYTES`, and
    nested at most :data:`MAX_JSON_DEPTH` arrays and objects deep?

    Every step is a C-speed bytes operation over a bounded input. Counting the
    brackets settles almost every body (that few cannot nest deeper). Otherwise
    escaped backslashes and quotes go, only quotes and brackets stay (at most
    :data:`MAX_JSON_MARKS`), every quote left delimits a string (as in any valid
    JSON) whose contents go too, and each pass removes the innermost bracket
    pairs: the passes needed are the depth. Unbalanced brackets never empty, and
    such a body is not JSON."""
    if len(body) > MAX_JSON_BYTES:
        return False
    if body.count(b"[") + body.count(b"{") <= MAX_JSON_DEPTH:
        return True
    marks = body.replace(b"\\\\", b"").replace(b'\\"', b"").translate(_SQUARE, _NOT_MARKS)
    if len(marks) > MAX_JSON_MARKS:
        return False
    brackets = b"".join(marks.split(b'"')[::2])
    for _ in range(MAX_JSON_DEPTH):
        if not brackets:
            return True
        brackets = brackets.replace(b"[]", b"")
    return not brackets


def _body_field(pointer: str) -> Extractor:
    def read(head: bytes, body: bytes) -> object:
        if not parse_bounded(body):
            return None
        try:
            value = json_pointer(json.loads(body), pointer)
        except (ValueError, KeyError, IndexError, TypeError, RecursionError):
            return None
        if value is None:
            return None
        if isinstance(value, str):
            # JSON may spell a lone surrogate ("\ud800"): it still names a session.
            return value.encode("utf-8", "surrogatepass")
        return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()

    return read


def extractor(request_key: str, options: PolicyOptions) -> Extractor:
    """The function that reads ``request_key`` from a request; ValueError if unknown."""
    if request_key == PROMPT_KEY:
        size = options.block_bytes

        def prompt(head: bytes, body: bytes) -> object:
            text = prompt_bytes(body)
            return chain(text, size) if text is not None else None

        return prompt
    kind, _, arg = request_key.partition(":")
    if kind == "header":
        name = arg.lower().encode()
        return lambda head, body: header_value(head, name)
    if kind == "cookie":
        cookie = arg.encode()
        return lambda head, body: cookie_value(head, cookie)
    if kind == "json":
        return _body_field(arg)
    raise ValueError(f"unknown request key {request_key!r}")


def read_key(read: Extractor, head: bytes, pending: list[bytes] | None) -> object:
    """Apply ``read`` to a request whose buffered body is ``pending``: the key, or
    None when the request has none or it cannot be read (never an exception)."""
    try:
        body = b"".join(pending) if pending else b""
        if body and b"\r\ntransfer-encoding: chunked" in head.lower():
            body = dechunk(body)
        return read(head, body)
    except Exception:  # a request no check above foresaw routes as one with no key
        log.warning("a request's routing key could not be read; routed without one")
        return None


def route_key(ex: Exchange, read: Extractor) -> object:
    """The request's key for the policy, read once from its head and buffered body."""
    key = ex.route_key
    if key is UNREAD:
        key = ex.route_key = read_key(read, ex.head, ex.pending)
    return key
