"""``resources.pin_cpus``: a replica asks for cores of its own only when it says so,
and its process (and what it starts) runs on exactly those."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from steadyserve.backends.local import pinned
from steadyserve.controller.capacity import request_for
from steadyserve.core.capacity import Request
from steadyserve.spec import parse_service


def test_only_asked_pinning_holds_cores(tmp_path: Path) -> None:
    def spec(resources: dict[str, object]) -> Request:
        return request_for(
            parse_service(
                {"name": "s", "run": "x $PORT", "resources": resources}, base_dir=tmp_path
            )
        )

    assert spec({"cpus": 2}) == Request()
    assert spec({"cpus": "1.5+", "pin_cpus": True}) == Request(cores=2)
    assert spec({"accelerators": {"A100": 2}}) == Request(accelerators=(("A100", 2),))
    assert spec({"accelerators": ["T4:0.5", "A100:1"]}).accelerators == (("T4", 1), ("A100", 1))
    any_of = spec({"any_of": [{"accelerators": "H100:1"}, {"cpus": 1}]})
    assert any_of.accelerators == (("H100", 1), ("", 0))


def test_a_pinned_command_and_its_children_run_on_its_cores() -> None:
    code = "import os, subprocess, sys; print(sorted(os.sched_getaffinity(0)))"
    child = f"{code}; subprocess.run([sys.executable, '-c', {code!r}])"
    out = subprocess.run(
        pinned([sys.executable, "-c", child], (0,)), capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[0]", "[0]"]
