"""Smoke-run bench/canary.py: it exits 0, prints its tables, aborts the canary,
leaves no process behind and writes its plot (run_bench checks the last two)."""

from __future__ import annotations

from pathlib import Path

from tests.bench.test_bench_smoke import run_bench


def test_canary_bench_prints_its_timeline(tmp_path: Path) -> None:
    out = run_bench("canary.py", "--clients", "4", "--fail-after", "3", out=tmp_path, timeout=180)
    assert "canary share" in out and "stable version failed (goal 0)" in out
    assert "analysis failed" in out, out
