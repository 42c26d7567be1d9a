"""How handle calls travel between replicas: frames of JSON, or pickle with a secret.

A call is one HTTP POST to the callee's app port at ``CALL_PATH`` (the load
balancers refuse that path, so only replicas reach it). Request and response
bodies are frames: one kind byte, a 4-byte big-endian length, the payload.

- ``j``: JSON. The default, and always used when the value is JSON-serialisable.
- ``p``: pickle. Only with ``GRAPH_SECRET_HEADER`` matching the secret the
  controller gives the replicas of one STEADY_HOME: unpickling runs code, so a
  caller without the secret can only send JSON, and gets JSON back.
- ``e``: an error, JSON ``{"type", "message"}``, raised by the caller.

A streamed response is the same frames one after another, each sent as soon
as the callee's generator yields it. No I/O here.
"""

from __future__ import annotations

import builtins
import json
import pickle
import struct
from typing import Any

from steadyserve.wire.replica_contract import HANDLE_CALL_PATH

CALL_PATH = HANDLE_CALL_PATH
METHOD_HEADER = "X-Steady-Method"
STREAM_HEADER = "X-Steady-Stream"
GRAPH_SECRET_HEADER = "X-Steady-Graph-Secret"
CONTENT_TYPE = "application/x-steady-frames"

JSON, PICKLE, ERROR = b"j", b"p", b"e"
_HEADER = struct.Struct(">cI")
MAX_FRAME = 256 * 1024 * 1024


class WireError(Exception):
    """A body that is not a sequence of well-formed frames."""


class CallError(RuntimeError):
    """The callee raised: its exception's type name and message."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(f"{type_name}: {message}" if message else type_name)
        self.type_name = type_name
        self.remote_message = message


_ERROR_CLASSES: dict[str, type[CallError]] = {}


def _text(self: CallError) -> str:
    return f"{self.type_name}: {self.remote_message}" if self.remote_message else self.type_name


def remote_error(type_name: str, message: str) -> CallError:
    """The callee's exception as the caller raises it: a ``CallError`` that is also an
    instance of the callee's builtin exception type (``TypeError``, ``KeyError``, ...),
    so ``except TypeError`` catches it as Ray's ``RayTaskError`` lets it."""
    builtin = getattr(builtins, type_name, None)
    # StopIteration and StopAsyncIteration would end the caller's loop, not fail it.
    if not (isinstance(builtin, type) and issubclass(builtin, Exception)) or issubclass(
        builtin, (StopIteration, StopAsyncIteration)
    ):
        return CallError(type_name, message)
    cls = _ERROR_CLASSES.get(type_name)
    if cls is None:
        try:
            # Its text is CallError's, whatever the builtin's own __str__ would show.
            cls = type(f"CallError({type_name})", (CallError, builtin), {"__str__": _text})
        except TypeError:  # a layout that cannot be combined
            cls = CallError
        _ERROR_CLASSES[type_name] = cls
    try:
        return cls(type_name, message)
    except Exception:
        return CallError(type_name, message)


class NotSerialisable(TypeError):
    """A value that JSON cannot carry, and pickle may not (no shared secret)."""


def encode(value: Any, allow_pickle: bool) -> bytes:
    """One frame holding ``value``: JSON when it round-trips, else pickle if allowed."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        if not allow_pickle:
            raise NotSerialisable(
                f"{type(value).__name__} is not JSON-serialisable ({exc}) and pickle "
                f"needs the graph secret (see docs/ray-serve-api.md)"
            ) from None
        return frame(PICKLE, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    if allow_pickle and json.loads(text) != value:  # tuples, non-str keys: JSON changes them
        return frame(PICKLE, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    return frame(JSON, text.encode())


def error_frame(exc: BaseException) -> bytes:
    body = {"type": type(exc).__name__, "message": " ".join(str(exc).split())[:2000]}
    return frame(ERROR, json.dumps(body).encode())


def frame(kind: bytes, payload: bytes) -> bytes:
    return _HEADER.pack(kind, len(payload)) + payload


class FrameReader:
    """Feed bytes as they arrive; take complete values out with ``values()``."""

    def __init__(self, allow_pickle: bool) -> None:
        self.allow_pickle = allow_pickle
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    @property
    def pending(self) -> int:
        return len(self._buffer)

    def values(self) -> list[Any]:
        """Every complete frame's value; an error frame raises ``CallError``."""
        out: list[Any] = []
        while len(self._buffer) >= _HEADER.size:
            kind, length = _HEADER.unpack_from(self._buffer)
            if length > MAX_FRAME:
                raise WireError(f"frame of {length} bytes is over the limit")
            end = _HEADER.size + length
            if len(self._buffer) < end:
                break
            payload = bytes(self._buffer[_HEADER.size : end])
            del self._buffer[:end]
            out.append(self._decode(kind, payload))
        return out

    def _decode(self, kind: bytes, payload: bytes) -> Any:
        if kind == JSON:
            try:
                return json.loads(payload)
            except ValueError as exc:
                raise WireError(f"bad JSON frame ({exc})") from None
        if kind == PICKLE:
            if not self.allow_pickle:
                raise WireError("a pickle frame without the graph secret")
            return pickle.loads(payload)
        if kind == ERROR:
            try:
                body = json.loads(payload)
                type_name, message = str(body["type"]), str(body["message"])
            except (ValueError, KeyError, TypeError):
                raise WireError("bad error frame") from None
            raise remote_error(type_name, message)
        raise WireError(f"unknown frame kind {kind!r}")


def decode_one(body: bytes, allow_pickle: bool) -> Any:
    """The single value of a whole body (a request, or an unstreamed result)."""
    reader = FrameReader(allow_pickle)
    reader.feed(body)
    values = reader.values()
    if len(values) != 1 or reader.pending:
        raise WireError("expected exactly one frame")
    return values[0]
