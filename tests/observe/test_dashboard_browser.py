"""The dashboard in a real browser (Debian's chromium, driven by Playwright) during a
rolling update under load: both versions' request rates and the update's progress
show, and a screenshot is saved with the test's files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.figures import report
from tests.helpers.steady import LoadClient, Steady
from tests.observe._observe import spec_text

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# Set to a path to keep a copy of the screenshot (docs/dashboard.png was made so).
SCREENSHOT_COPY = os.environ.get("STEADY_DASHBOARD_SCREENSHOT")

BOTH_VERSIONS_SERVING = """() => {
  const rate = (v) => {
    const cell = document.querySelector(`tr[data-version="${v}"] td.rps`);
    return cell ? parseFloat(cell.textContent) : 0;
  };
  const box = document.querySelector('[data-update-status="IN_PROGRESS"]');
  const fresh = document.querySelector("b.new-ready");
  return rate("1") > 0 && rate("2") > 0 && box !== null && fresh !== null
    && parseInt(fresh.textContent, 10) >= 1;
}"""


def _required() -> bool:
    """CI (.ci/run) sets STEADY_REQUIRE_BROWSER=1: there a missing browser fails."""
    return bool(os.environ.get("STEADY_REQUIRE_BROWSER") or os.environ.get("CI"))


def _playwright():  # type: ignore[no-untyped-def]
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if _required():
            raise
        pytest.skip("playwright is not installed (pip install -e '.[test]')")
    if not CHROMIUM.exists():
        if _required():
            raise AssertionError(
                f"STEADY_REQUIRE_BROWSER is set and {CHROMIUM} is missing"
                " (apt-get install chromium)"
            )
        pytest.skip("no /usr/bin/chromium (apt-get install chromium)")
    return sync_playwright


def _watch_console(page: Any) -> list[str]:
    """Every console error and uncaught exception of the page: each fails the test."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    page.on(
        "response", lambda r: errors.append(f"HTTP {r.status} {r.url}") if r.status >= 400 else None
    )
    return errors


# Three refreshes that reached the controller and drew every card without an error.
REFRESHED = """() => {
  const conn = document.getElementById("conn");
  return parseInt(conn.dataset.refreshes || "0", 10) >= 3
    && conn.textContent.startsWith("updated");
}"""


@pytest.mark.timeout(240)
def test_dashboard_shows_a_rolling_update_under_load(steady: Steady, tmp_path: Path) -> None:
    sync_playwright = _playwright()
    v1 = tmp_path / "v1.yaml"
    v1.write_text(spec_text("v1"))
    # v2 takes a few seconds to start, so the update is still running while we look.
    v2 = tmp_path / "v2.yaml"
    v2.write_text(spec_text("v2", run="sleep 6 && python3 server.py"))
    steady.run("up", str(v1), "--wait")
    port = int(steady.service("web")["endpoint"].rsplit(":", 1)[1])
    url = steady.run("dashboard", "--no-browser").stdout.strip()
    assert "/dashboard/login?code=" in url, url  # one-time: no secret on chromium's argv

    client = LoadClient(port, max_seconds=150).start()
    shot = tmp_path / "dashboard.png"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
            )
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                errors = _watch_console(page)
                page.goto(url)
                # Redirected to the page without the code; the session cookie is
                # HttpOnly, so the page's script cannot read it.
                assert page.url.endswith("/dashboard/"), page.url
                assert page.evaluate("document.cookie") == ""
                page.wait_for_selector('section.service[data-service="web"] tr[data-version="1"]')
                page.wait_for_timeout(3000)  # a few seconds of v1 alone on the charts
                steady.run("update", "web", str(v2))
                page.wait_for_function(BOTH_VERSIONS_SERVING, timeout=90_000, polling=250)
                # A few seconds of both versions on the charts; the second v2 replica
                # is still starting (sleep 6), so the update is still in progress.
                page.wait_for_timeout(2500)
                page.wait_for_function(BOTH_VERSIONS_SERVING, timeout=30_000, polling=250)
                page.screenshot(path=str(shot), full_page=True)
                text = page.inner_text("main")
                assert errors == [], errors
            finally:
                browser.close()
        steady.wait_for(
            "web",
            lambda s: s["update"]["status"] == "SUCCEEDED",
            timeout=90,
            what="the update to finish",
        )
    finally:
        client.stop()
    report(f"dashboard during a rolling update: {client.summary()}")
    shown = text.lower()  # headings are upper-cased by CSS
    assert "update in progress" in shown
    assert "rolling v1 → v2" in shown
    assert shot.stat().st_size > 10_000
    if SCREENSHOT_COPY:
        shutil.copy(shot, SCREENSHOT_COPY)
    assert client.failed == 0, client.summary()


@pytest.mark.timeout(180)
def test_dashboard_draws_quiet_services_and_one_at_zero(steady: Steady, tmp_path: Path) -> None:
    """A service nobody has called yet and one scaled to zero replicas: every card
    draws, the header says the page is current, and the console stays clean."""
    sync_playwright = _playwright()
    quiet = tmp_path / "quiet.yaml"
    quiet.write_text(spec_text("quiet", replicas=1).replace("name: web", "name: quiet"))
    zero = tmp_path / "zero.yaml"
    zero.write_text(spec_text("zero", replicas=0).replace("name: web", "name: zero"))
    steady.run("up", str(quiet), "--wait")
    steady.run("up", str(zero))
    url = steady.run("dashboard", "--no-browser").stdout.strip()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            errors = _watch_console(page)
            page.goto(url)
            page.wait_for_function(REFRESHED, timeout=30_000, polling=250)
            quiet_card = page.inner_text('section.service[data-service="quiet"]').lower()
            zero_card = page.inner_text('section.service[data-service="zero"]').lower()
            header = page.inner_text("#conn")
        finally:
            browser.close()
    assert errors == [], errors
    assert header.startswith("updated"), header
    assert "no requests through its endpoint yet" in quiet_card, quiet_card
    assert "1/1" in quiet_card and "ready" in quiet_card
    assert "no replicas" in zero_card and "0/0" in zero_card, zero_card
