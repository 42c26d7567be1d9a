"""FrameTracker: where WebSocket frames end, however the stream is cut into reads.

The load balancer's 1001 close frame must go between two of the replica's frames;
a tracker that lost count would put it inside one and corrupt the stream.
"""

from __future__ import annotations

import os
import struct

from hypothesis import given
from hypothesis import strategies as st

from steadyserve.lb.websocket import CLOSE_GOING_AWAY, FrameTracker, is_websocket_upgrade
from steadyserve.wire.lb_process import worker_count


def frame(payload: bytes, masked: bool) -> bytes:
    n = len(payload)
    if n < 126:
        length = bytes(((0x80 if masked else 0) | n,))
    elif n < 1 << 16:
        length = bytes(((0x80 if masked else 0) | 126,)) + struct.pack("!H", n)
    else:
        length = bytes(((0x80 if masked else 0) | 127,)) + struct.pack("!Q", n)
    return b"\x82" + length + (os.urandom(4) if masked else b"") + payload


frames = st.lists(
    st.tuples(st.sampled_from([0, 1, 125, 126, 127, 65535, 65536, 70000]), st.booleans()),
    min_size=1,
    max_size=6,
)


@given(frames, st.lists(st.integers(1, 9000), max_size=30))
def test_boundaries_are_found_whatever_the_reads(
    spec: list[tuple[int, bool]], cuts: list[int]
) -> None:
    encoded = [frame(b"x" * n, masked) for n, masked in spec]
    stream = b"".join(encoded)
    ends, at = set(), 0
    for f in encoded:
        at += len(f)
        ends.add(at)
    tracker, pos, chunks = FrameTracker(), 0, []
    for cut in cuts:
        chunks.append(stream[pos : pos + cut])
        pos += cut
    chunks.append(stream[pos:])
    consumed = 0
    for chunk in chunks:
        # Stop at each boundary in turn, as the LB does when a close is due.
        while chunk:
            used = tracker.advance(chunk, stop_at_boundary=True)
            if used == 0:
                used = tracker.advance(chunk[:1])
            consumed += used
            chunk = chunk[used:]
            assert tracker.at_boundary == (consumed in ends or consumed == 0), consumed
    assert tracker.at_boundary


def test_the_close_frame_is_1001_going_away() -> None:
    tracker = FrameTracker()
    assert tracker.advance(CLOSE_GOING_AWAY) == len(CLOSE_GOING_AWAY)
    assert tracker.at_boundary
    assert CLOSE_GOING_AWAY[0] == 0x88  # FIN, opcode close
    assert struct.unpack("!H", CLOSE_GOING_AWAY[2:4])[0] == 1001
    assert CLOSE_GOING_AWAY[4:] == b"going away"


def test_only_websocket_gets_are_tunnelled() -> None:
    assert is_websocket_upgrade(b"GET", b"websocket", http10=False)
    assert is_websocket_upgrade(b"GET", b"WebSocket, foo", http10=False)
    assert not is_websocket_upgrade(b"POST", b"websocket", http10=False)
    assert not is_websocket_upgrade(b"GET", b"h2c", http10=False)
    assert not is_websocket_upgrade(b"GET", None, http10=False)
    assert not is_websocket_upgrade(b"GET", b"websocket", http10=True)


def test_worker_count() -> None:
    assert worker_count(3) == 3
    assert worker_count("auto") == max(1, len(os.sched_getaffinity(0)) // 2)
