"""``steady dashboard``: print a one-time link to the dashboard, and open it when a
browser exists."""

from __future__ import annotations

import contextlib
import os
import sys
import webbrowser
from urllib.parse import quote

import click

from steadyserve.client.connection import Client, CommandError
from steadyserve.home.paths import Home


def dashboard_url(controller_url: str, code: str) -> str:
    """The page's one-time link: the code opens a session once, within a minute,
    so a browser's command line (which every local user can read) holds nothing
    that lasts (controller/dashboard_login.py)."""
    return f"{controller_url.rstrip('/')}/dashboard/login?code={quote(code, safe='')}"


def _has_gui() -> bool:
    """Only open a graphical browser: a text one would take over the terminal."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


@click.command()
@click.option("--no-browser", is_flag=True, help="Only print the link.")
def dashboard(no_browser: bool) -> None:
    """Print a one-time link to the live dashboard (starting the controller if needed).

    The link works once, within a minute: it opens a browser session and holds
    no secret (docs/security.md). Run the command again for a new one.

    \b
    Example:
      steady dashboard --no-browser
    """
    client = Client(Home.from_env())
    try:
        code = client.call("POST", "/api/v1/dashboard/codes", {})["code"]
    except CommandError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    url = dashboard_url(client.url, str(code))
    click.echo(url)
    if not no_browser and _has_gui():
        with contextlib.suppress(webbrowser.Error):  # no browser: the URL is the answer
            webbrowser.get().open(url)
