"""One-time dashboard links, and the browser sessions they open.

``steady dashboard`` must never put the API's secret on a browser's command line
or in a URL: ``/proc/PID/cmdline`` is readable by every local user, and URLs end
up in history and logs. So the CLI, which holds the secret, asks for a code
(``POST /api/v1/dashboard/codes``) and prints ``/dashboard/login?code=CODE``.
Opening it spends the code (once, within ``CODE_TTL_S``) and answers with a
cookie holding a new random session secret, then redirects to the page without
the code. The cookie is HttpOnly (the page's script cannot read it), SameSite=
Strict, and scoped to the dashboard's data path; it reads the dashboard's JSON
and nothing else (controller/api.py), so a cookie that leaks (browsers send a
127.0.0.1 cookie to every port of that address) shows the page's data but
changes nothing. Codes and sessions live in the controller's memory: a restarted
controller asks for a new link.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable

from aiohttp import web

from steadyserve.controller.clock import SYSTEM_CLOCK

CODE_TTL_S = 60.0
SESSION_TTL_S = 12 * 3600.0
MAX_CODES = 32  # unspent codes kept; the oldest goes first
MAX_SESSIONS = 64
LOGIN_PATH = "/dashboard/login"
PAGE_PATH = "/dashboard/"
COOKIE_PATH = "/api/v1/dashboard"
"""The only paths a browser sends the cookie to: the page's two data calls."""
COOKIE_ROUTES = frozenset({("GET", "/api/v1/dashboard"), ("GET", "/api/v1/dashboard/timeseries")})
"""What a session cookie may call (controller/api.py checks it)."""


def _digest(value: str) -> str:
    """Kept by digest: a look-up's timing says nothing about the value itself."""
    return hashlib.sha256(value.encode()).hexdigest()


class Logins:
    """Unspent codes and live sessions, each with its expiry (on ``clock``)."""

    def __init__(self, home_id: str, clock: Callable[[], float] = SYSTEM_CLOCK.now) -> None:
        # Cookies are per host, not per port: two homes' controllers on 127.0.0.1
        # each keep their own cookie.
        self.cookie_name = f"steady_dashboard_{home_id}"
        self._clock = clock
        self._codes: dict[str, float] = {}
        self._sessions: dict[str, float] = {}

    def new_code(self) -> str:
        now = self._clock()
        self._drop_expired(now)
        code = secrets.token_urlsafe(24)
        self._codes[_digest(code)] = now + CODE_TTL_S
        while len(self._codes) > MAX_CODES:
            self._codes.pop(next(iter(self._codes)))
        return code

    def spend(self, code: str) -> str | None:
        """A new session secret for a live, unspent code; None otherwise."""
        now = self._clock()
        self._drop_expired(now)
        if self._codes.pop(_digest(code), None) is None:
            return None
        session = secrets.token_urlsafe(32)
        self._sessions[_digest(session)] = now + SESSION_TTL_S
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.pop(next(iter(self._sessions)))
        return session

    def valid(self, session: str | None) -> bool:
        if not session:
            return False
        expires = self._sessions.get(_digest(session))
        return expires is not None and self._clock() < expires

    def _drop_expired(self, now: float) -> None:
        for table in (self._codes, self._sessions):
            for key in [k for k, expires in table.items() if expires <= now]:
                del table[key]


def add_routes(app: web.Application, logins: Logins) -> None:
    """``POST /api/v1/dashboard/codes`` (needs the API's secret) and the public
    ``GET /dashboard/login`` that spends a code."""
    routes = web.RouteTableDef()

    @routes.post("/api/v1/dashboard/codes")
    async def new_code(request: web.Request) -> web.Response:
        return web.json_response({"code": logins.new_code(), "expires_in_s": CODE_TTL_S})

    @routes.get(LOGIN_PATH)
    async def login(request: web.Request) -> web.Response:
        private = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
        session = logins.spend(request.query.get("code", ""))
        if session is None:
            return web.Response(
                status=401,
                text="This dashboard link was used already or has expired: "
                "run `steady dashboard` for a new one.\n",
                headers=private,
            )
        response = web.Response(status=303, headers={**private, "Location": PAGE_PATH})
        response.set_cookie(
            logins.cookie_name,
            session,
            path=COOKIE_PATH,
            max_age=int(SESSION_TTL_S),
            httponly=True,
            samesite="Strict",
        )
        return response

    app.add_routes(routes)
