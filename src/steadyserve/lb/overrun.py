"""A replica that sent bytes past the end of the response it was asked for.

A passthrough read (lb/upstream.py) may hold the end of one response and the
start of something nobody asked for. Only the response goes to the client, and
the connection is never used again: the stray bytes reach no one. Where the
response ends is found by re-parsing the bytes the connection kept of it
(framing.py's ``response_end``); when it kept too little to tell (a large
response), closing the client is the only answer that delivers no foreign byte.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from steadyserve.lb.framing import response_end
from steadyserve.lb.request_id import stamped

if TYPE_CHECKING:
    from steadyserve.lb.exchange import Exchange
    from steadyserve.lb.upstream import UpstreamConnection


def overrun(conn: UpstreamConnection, exchange: Exchange, data: bytes) -> None:
    """A passthrough response complete, and more bytes after it in ``data``:
    forward the response only, and never use ``conn`` again."""
    end = end_in(conn, data)
    if end is None:
        conn.proxy.upstream_failed(exchange, conn, "bytes past the end of a response")
        return
    first = not conn.wrote  # this read holds the head: stamp it
    conn.wrote = True
    held = conn.held
    if first and exchange.request_id is not None:
        conn.held = []
        exchange.client.write(stamped(b"".join([*held, data[:end]]), exchange.request_id))
    elif held:
        conn.held = []
        exchange.client.write_many([*held, data[:end]])
    else:
        exchange.client.write(data[:end])
    conn.keep_alive = False
    conn.finish(exchange)


def end_in(conn: UpstreamConnection, data: bytes) -> int | None:
    """Where in ``data`` (the last read) the current response ends, found by
    re-parsing the response's bytes; None when they were not all kept."""
    seen = conn.seen
    if seen is None or not seen or seen[-1] is not data:
        return None
    return response_end(seen)
