"""bench/lb_python_cost.py drives the real connection objects: it must keep working
as the hot path changes (it fails loudly when its requests are not proxied)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_lb_python_cost_proxies_and_prints_its_figure() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / "lb_python_cost.py"), "-n", "2000", "--runs", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "us of CPU per proxied request" in proc.stdout, proc.stdout
