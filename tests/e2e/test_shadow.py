"""Shadow steps end to end (one controller for the module): a version that drops a
JSON field in 2% of its answers is aborted while no client ever got an answer from
it, and a version whose answers differ only by a time stamp walks on to 100% (the
noise learned from pairs of stable answers), seen through the endpoint and
``steady status --json``."""

from __future__ import annotations

import json
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import _steady_in
from tests.helpers.steady import LoadClient, Steady
from tests.observe.test_dashboard_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    _playwright,
    _watch_console,
)

APP = Path(__file__).parent / "apps" / "shadow_app.py"


def spec(drop: int = 0, pause: int = 2, marker: str = "v1", compared: int = 100) -> str:
    return textwrap.dedent(f"""\
        name: web
        service:
          readiness_probe: /health
          replicas: 1
          health_check_period_s: 0.2
          graceful_shutdown_wait_loop_s: 0.05
          graceful_shutdown_timeout_s: 3
          update_mode: canary
          canary:
            steps: [{{shadow: 50}}, {{pause: {pause}}}, {{weight: 100}}]
            analysis: {{max_shadow_diff_rate: 0.01, min_shadow_compared: {compared}}}
            shadow: {{ignore: [$.version], noise_share: 0.5}}
        envs:
          DROP_PERCENT: "{drop}"
          STAMP: "1"
          MARKER: {marker}
        run: python3 {APP}
        """)


@pytest.fixture(scope="module")
def web() -> Iterator[tuple[Steady, Path, int]]:
    with tempfile.TemporaryDirectory(prefix="steady-test-") as tmp:
        home = Path(tmp) / "home"
        for cli in _steady_in(Steady(home), home):
            path = Path(tmp) / "v1.yaml"
            path.write_text(spec())
            cli.run("up", str(path), "--wait", "--timeout", "60")
            port = int(str(cli.service("web")["endpoint"]).rsplit(":", 1)[1])
            yield cli, Path(tmp), port


def update(steady: Steady, tmp: Path, text: str, name: str) -> None:
    path = tmp / name
    path.write_text(text)
    steady.run("update", "web", str(path))


def finished(svc: dict[str, Any]) -> bool:
    return (svc.get("update") or {}).get("status") not in (None, "IN_PROGRESS")


def ready_versions(svc: dict[str, Any]) -> set[int]:
    return {r["version"] for r in svc["replicas"] if r["status"] == "READY"}


def versions_answered(client: LoadClient) -> set[str]:
    return {json.loads(body)["version"] for _, body in client.bodies}


def test_a_version_dropping_a_field_is_aborted_before_any_client_sees_it(
    web: tuple[Steady, Path, int],
) -> None:
    steady, tmp, port = web
    client = LoadClient(port, path="/orders/7?api_key=s3cr3t", max_seconds=60).start()
    try:
        update(steady, tmp, spec(drop=2, pause=30), "v2.yaml")
        svc = steady.wait_for("web", finished, timeout=45, what="the shadow step's verdict")
    finally:
        client.stop()
    update_row = svc["update"]
    assert update_row["status"] == "FAILED", update_row
    assert "shadow analysis failed" in update_row["message"]
    assert "removed $.total" in update_row["message"]
    assert client.failed == 0, client.summary()
    assert versions_answered(client) == {"1"}, "a client got an answer of version 2"
    events = json.loads(steady.run("status", "web", "--events", "--json").stdout)
    text = json.dumps(events)
    assert "shadow failed" in text and "s3cr3t" not in text
    assert ready_versions(steady.service("web")) == {1}, "back on the stable version only"


def test_answers_differing_only_by_a_time_stamp_walk_on(web: tuple[Steady, Path, int]) -> None:
    """Seen in ``status --json`` and on the dashboard's update panel."""
    steady, tmp, port = web
    sync_playwright = _playwright()
    url = steady.run("dashboard", "--no-browser").stdout.strip()
    client = LoadClient(port, path="/orders/8", max_seconds=60).start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
            )
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                errors = _watch_console(page)
                page.goto(url)
                page.wait_for_selector('section.service[data-service="web"]')
                update(steady, tmp, spec(pause=10, marker="v3", compared=40), "v3.yaml")

                def compared(svc: dict[str, Any]) -> bool:
                    shadow = (svc.get("canary") or {}).get("shadow") or {}
                    return shadow.get("outcome") == "passed"

                mid = steady.wait_for("web", compared, timeout=30, what="a passed verdict")
                page.wait_for_selector('[data-shadow-outcome="passed"]', timeout=5_000)
                panel = page.inner_text('[data-shadow-outcome="passed"]')
                assert errors == [], errors
            finally:
                browser.close()
        svc = steady.wait_for("web", finished, timeout=45, what="the update's end")
    finally:
        client.stop()
    shadow = mid["canary"]["shadow"]
    assert mid["canary"]["weight"] == 0 and shadow["mirror"] == 50
    assert shadow["compared"] >= 40 and shadow["differed"] == 0 and shadow["rate"] == 0
    assert shadow["noise"] == ["changed $.at"]
    assert "shadow 50%" in panel and "noise (ignored): changed $.at" in panel
    assert svc["update"]["status"] == "SUCCEEDED", svc["update"]
    assert client.failed == 0, client.summary()
    new = svc["update"]["to_version"]
    assert svc["version"] == new and ready_versions(svc) == {new}
