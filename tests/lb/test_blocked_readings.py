"""A blocked path is refused under every spelling some common server routes to it.

Differential: hypothesis spells the blocked paths every way the servers people put
behind SteadyServe read differently (``;params`` on any segment, case, ``%2F``,
``%5C``, ``%3B``, overlong UTF-8, trailing slashes, repeated slashes, dot segments,
``#`` and NUL), sends each through the load balancer's own target handling (what
it refuses, and what it would forward), and asks each server's router what the
forwarded target reaches. Whenever one routes it to a blocked path, the load
balancer must have refused it. The Python servers run here for real: Python's
``http.server`` with ``urlparse`` (the example server), uvicorn's path decoding
with Starlette's router (FastAPI), aiohttp's router, Werkzeug's dev server with its
router (Flask). Go's ``net/http``, Node/Express, nginx and Tomcat/Spring are
written from their documented rules (docs/security.md has the table).
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Callable
from urllib.parse import unquote, unquote_to_bytes, urlparse, urlsplit

import httptools
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from hypothesis import example, given, settings
from hypothesis import strategies as st
from starlette.responses import Response
from starlette.routing import Match, Route
from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule

from steadyserve.lb.target import BadTarget, blocked_key, is_blocked, is_plain, normalise

BLOCKED = ("/-/reconfigure", "/-/steady/call")
BLOCKED_KEYS = frozenset(blocked_key(p.encode()) for p in BLOCKED)


def forwarded(spelling: bytes) -> bytes | None:
    """What the load balancer forwards for ``spelling``; None when it refuses it
    (400 for a target it cannot forward, 404 for a blocked one), as request_head does."""
    target = spelling
    if not is_plain(target):
        try:
            target, _ = normalise(target, b"POST")
        except BadTarget:
            return None
    return None if is_blocked(target, BLOCKED_KEYS) else target


# -- the servers, each answering "which route does this target reach?" ---------------
def python_urlparse(target: str) -> str | None:
    return urlparse(target).path  # examples/http_server/server.py


def python_urlparse_unquoted(target: str) -> str | None:
    return unquote(urlparse(target).path)  # a handler that decodes what urlparse gives


def _uvicorn_path(target: bytes) -> str | None:
    try:
        raw_path = httptools.parse_url(target).path
        path: str = raw_path.decode("ascii")
    except (httptools.HttpParserInvalidURLError, UnicodeDecodeError):
        return None  # uvicorn answers 400
    return unquote(path) if "%" in path else path


_STARLETTE = [Route(p, lambda request: Response()) for p in BLOCKED]


def starlette(target: str) -> str | None:
    path = _uvicorn_path(target.encode("latin-1"))
    if path is None:
        return None
    scope = {"type": "http", "path": path, "root_path": "", "method": "POST", "headers": []}
    for route in _STARLETTE:
        if route.matches(scope)[0] is Match.FULL:
            return route.path
    return None


async def _ok(request: web.Request) -> web.Response:
    return web.Response()


_AIOHTTP = web.Application()
for _path in BLOCKED:
    _AIOHTTP.router.add_post(_path, _ok)
_LOOP = asyncio.new_event_loop()


def aiohttp_router(target: str) -> str | None:
    try:
        request = make_mocked_request("POST", target, app=_AIOHTTP)
        match = _LOOP.run_until_complete(_AIOHTTP.router.resolve(request))
    except Exception:  # aiohttp refuses the target: nothing is reached
        return None
    if match.http_exception is not None:
        return None
    info = match.route.resource.get_info() if match.route.resource else {}
    return str(info.get("path")) if info.get("path") else None


_WERKZEUG = Map([Rule(p, endpoint=p) for p in BLOCKED])


def werkzeug(target: str) -> str | None:
    url = urlsplit(target)  # werkzeug.serving.WSGIRequestHandler.make_environ
    path = f"/{url.netloc}{url.path}" if not url.scheme and url.netloc else url.path
    adapter = _WERKZEUG.bind("x", path_info=unquote(path))
    try:
        endpoint, _ = adapter.match(method="POST")
    except HTTPException:  # 404, or a redirect to a canonical path the LB then sees
        return None
    return str(endpoint)


def _dots(path: str) -> str:
    cleaned = posixpath.normpath(path) if path else "/"
    cleaned = "/" + cleaned.lstrip("/")
    return cleaned + ("/" if path.endswith("/") and cleaned != "/" else "")


def nginx(target: str) -> str | None:
    # Decodes %XX once, merges slashes, resolves dot segments (ngx_http_parse_complex_uri).
    path = unquote_to_bytes(target.partition("?")[0]).decode("latin-1")
    return _dots(path)


def go_servemux(target: str) -> str | None:
    # r.URL.Path is decoded; ServeMux serves path.Clean's form (by redirect when it differs).
    path = unquote(urlsplit(target).path)
    return _dots(path).rstrip("/") or "/"


def tomcat_spring(target: str) -> str | None:
    # Path parameters (";...") are removed from every segment, then decoded and normalised.
    path = target.partition("?")[0]
    path = "/".join(s.partition(";")[0] for s in path.split("/"))
    return _dots(unquote(path))


def express(target: str) -> str | None:
    # Router matches req.path case-insensitively, a trailing slash optional (strict: false).
    path = urlsplit(target).path
    return path.lower().rstrip("/") or "/"


SERVERS: dict[str, Callable[[str], str | None]] = {
    "python urlparse": python_urlparse,
    "python urlparse+unquote": python_urlparse_unquoted,
    "uvicorn+starlette": starlette,
    "aiohttp": aiohttp_router,
    "werkzeug": werkzeug,
    "nginx": nginx,
    "go net/http": go_servemux,
    "tomcat/spring": tomcat_spring,
    "express": express,
}


def reached(target: bytes) -> list[str]:
    """The servers that route ``target`` to a blocked path."""
    text = target.decode("latin-1")
    hits = []
    for name, server in SERVERS.items():
        path = server(text)
        # Case counts (Express's reading lowercases); a trailing slash does not.
        if path is not None and (path.rstrip("/") or "/") in BLOCKED:
            hits.append(name)
    return hits


# -- spellings ----------------------------------------------------------------------
def _encode(ch: str, how: int) -> str:
    code = ord(ch)
    if how == 1:
        return f"%{code:02X}"
    if how == 2:
        return f"%25{code:02X}"  # double
    if how == 3:
        return f"%{code:02x}"
    if how == 4 and code < 0x80:  # overlong UTF-8, two bytes
        return f"%{0xC0 | code >> 6:02X}%{0x80 | code & 0x3F:02X}"
    return ch


@st.composite
def spellings(draw: st.DrawFn) -> bytes:
    segments = draw(st.sampled_from(BLOCKED)).strip("/").split("/")
    out = ""
    for i, segment in enumerate(segments):
        if draw(st.integers(0, 5)) == 0:
            out += draw(st.sampled_from(["/./", "/x/../", "//", "/.%2e/", "/x/..;/", "/%2e/"]))
        sep = draw(st.sampled_from(["/", "/", "/", "%2F", "%2f", "\\", "%5C", "%C0%AF", "%252F"]))
        out += "/" if i == 0 and sep not in ("/",) and draw(st.booleans()) else sep
        text = "".join(
            _encode(c, draw(st.integers(0, 8))) if draw(st.integers(0, 3)) == 0 else c
            for c in segment
        )
        if draw(st.integers(0, 4)) == 0:
            text = text.upper() if draw(st.booleans()) else text.swapcase()
        out += text
        if draw(st.integers(0, 3)) == 0:
            out += draw(st.sampled_from([";x", ";", ";a=b", "%3Bx", "%3b", ";jsessionid=1"]))
    out += draw(st.sampled_from(["", "", "/", "//", "/.", "?q=1", "#f", "%00.png", "%23x", "%3Fx"]))
    if not out.startswith("/"):
        out = "/" + out
    return out.encode("latin-1")


@settings(max_examples=800)
@given(spellings())
@example(b"/-/reconfigure;x")  # the curl: urlparse dropped ";x"
@example(b"/-/reconfigure;x/")
@example(b"/-;a/reconfigure")
@example(b"/-/RECONFIGURE")
@example(b"/-/reconfigure#x")
@example(b"/-/reconfigure%00.png")
@example(b"/-%C0%AFreconfigure")
@example(b"/-/x/..;/reconfigure")
@example(b"/-/steady/call;x")
def test_no_server_reaches_a_blocked_path_the_lb_forwards(spelling: bytes) -> None:
    target = forwarded(spelling)
    if target is None:
        return  # refused
    assert not reached(target), (spelling, target, reached(target))


@pytest.mark.parametrize("path", ["/", "/-/reconfigured", "/x/-/reconfigure", "/-/steady", "/a;b"])
def test_other_paths_are_forwarded(path: str) -> None:
    assert forwarded(path.encode()) is not None


def test_under_a_route_prefix_the_path_the_application_sees_is_checked_too() -> None:
    from steadyserve.lb.gateway import _is_blocked_in

    assert _is_blocked_in(b"/app/-/steady/call", b"/app", BLOCKED_KEYS)
    assert _is_blocked_in(b"/app/-/steady/call;x", b"/app/", BLOCKED_KEYS)
    assert not _is_blocked_in(b"/app/-/steady/calls", b"/app", BLOCKED_KEYS)
    assert not _is_blocked_in(b"/app/x", b"/", BLOCKED_KEYS)
