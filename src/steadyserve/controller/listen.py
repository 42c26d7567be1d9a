"""Where the controller's API listens: its address checked, its socket bound once.

Apart from the daemon so that the rule is read in one place: beyond loopback only
with ``STEADY_TOKEN`` (every local user reaches loopback; others reach the rest),
and a port that cannot be bound stops the start with the address in its one line.
"""

from __future__ import annotations

import os
import socket

from aiohttp import web

from steadyserve.controller.endpoint import controller_port


def api_host(token: str | None) -> str:
    """``STEADY_CONTROLLER_HOST`` (default loopback); beyond loopback needs a token."""
    host = os.environ.get("STEADY_CONTROLLER_HOST", "127.0.0.1")
    if host not in ("127.0.0.1", "localhost", "::1") and token is None:
        raise SystemExit("STEADY_CONTROLLER_HOST: binding beyond loopback needs STEADY_TOKEN")
    return host


async def listen(app: web.Application, host: str) -> tuple[web.AppRunner, str]:
    """Serve ``app`` on ``host`` at the controller's port; (runner, its URL)."""
    # Long-polls from load balancers would hold a graceful shutdown for their full wait.
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
    await runner.setup()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    port = controller_port()
    try:
        sock.bind((host, port))
    except OSError as exc:  # the line a failed start shows: which address
        sock.close()
        raise OSError(exc.errno, f"{exc.strerror} ({host}:{port})") from None
    await web.SockSite(runner, sock).start()
    shown = "127.0.0.1" if host in ("0.0.0.0", "localhost") else host
    shown = f"[{shown}]" if ":" in shown else shown
    return runner, f"http://{shown}:{sock.getsockname()[1]}"
