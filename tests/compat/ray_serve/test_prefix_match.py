"""The gateway's route choice: Ray Serve's longest-prefix rule."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from steadyserve.lb.gateway import match_prefix, request_path, with_root_path

PREFIXES = sorted([b"/", b"/api", b"/api/v2", b"/summarize"], key=len, reverse=True)


def test_longest_prefix_wins_on_segment_boundaries() -> None:
    assert match_prefix(b"/api/v2/x", PREFIXES) == b"/api/v2"
    assert match_prefix(b"/api/v2", PREFIXES) == b"/api/v2"
    assert match_prefix(b"/api/v22", PREFIXES) == b"/api"
    assert match_prefix(b"/apix", PREFIXES) == b"/"
    assert match_prefix(b"/summarize", PREFIXES) == b"/summarize"
    assert match_prefix(b"/apix", [b"/api"]) is None


def test_request_path_drops_the_query() -> None:
    assert request_path(b"GET /a/b?x=1 HTTP/1.1\r\nhost: h\r\n\r\n") == b"/a/b"
    assert request_path(b"POST /a HTTP/1.1\r\n") == b"/a"


def test_the_matched_prefix_goes_first_among_the_headers() -> None:
    """The runner gives it to the ASGI app as root_path (Ray's proxy sets it)."""
    head = b"GET /api/x HTTP/1.1\r\nx-steady-root-path: /evil\r\nhost: h\r\n\r\n"
    assert with_root_path(head, b"/api") == (
        b"GET /api/x HTTP/1.1\r\nx-steady-root-path: /api\r\n"
        b"x-steady-root-path: /evil\r\nhost: h\r\n\r\n"
    )


segment = st.text(alphabet="abc", min_size=1, max_size=3)


@given(st.lists(st.lists(segment, max_size=3), max_size=5), st.lists(segment, max_size=4))
def test_the_match_is_a_whole_segment_prefix_and_the_longest(
    routes: list[list[str]], parts: list[str]
) -> None:
    prefixes = sorted({("/" + "/".join(r)).encode() for r in routes}, key=len, reverse=True)
    path = ("/" + "/".join(parts)).encode()
    found = match_prefix(path, prefixes)
    fits = [p for p in prefixes if p == b"/" or path == p or path.startswith(p + b"/")]
    assert found == (max(fits, key=len) if fits else None)
