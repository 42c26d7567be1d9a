"""``steady dashboard``: print the dashboard's URL, and open it when a browser exists."""

from __future__ import annotations

import contextlib
import os
import sys
import webbrowser
from urllib.parse import quote

import click

from steadyserve.cli.client import CommandError, start_controller
from steadyserve.paths import Home


def dashboard_url(controller_url: str, token: str | None) -> str:
    """The page's URL; a token rides in the fragment, which browsers never send."""
    url = controller_url.rstrip("/") + "/dashboard/"
    return f"{url}#token={quote(token, safe='')}" if token else url


def _has_gui() -> bool:
    """Only open a graphical browser: a text one would take over the terminal."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


@click.command()
@click.option("--no-browser", is_flag=True, help="Only print the URL.")
def dashboard(no_browser: bool) -> None:
    """Print the URL of the live dashboard (starting the controller if needed).

    \b
    Example:
      steady dashboard --no-browser
    """
    try:
        info = start_controller(Home.from_env())
    except CommandError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    url = dashboard_url(str(info["url"]), os.environ.get("STEADY_TOKEN") or None)
    click.echo(url)
    if not no_browser and _has_gui():
        with contextlib.suppress(webbrowser.Error):  # no browser: the URL is the answer
            webbrowser.get().open(url)
