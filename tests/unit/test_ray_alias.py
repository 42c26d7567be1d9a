"""``from ray import serve`` as written (serve/ray_alias.py): in a sealed version
environment (no Ray at all), in the controller's (a Ray without Ray Serve's
dependencies), and with the switch; anything else from ``ray`` is one line."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from steadyserve.envs import build as eb
from steadyserve.envs import seal
from steadyserve.home.paths import Home

CODE = """
import sys
from steadyserve.serve import ray_alias
ray_alias.install()
from ray import serve
from ray.serve.handle import DeploymentHandle
from ray.serve.config import AutoscalingPolicy
import steadyserve.serve as ours
import steadyserve.serve.config as our_config
assert serve.deployment is ours.deployment and DeploymentHandle is ours.DeploymentHandle
assert AutoscalingPolicy is our_config.AutoscalingPolicy
print("serve ok")
for attempt in ("import ray; ray.remote", "serve.grpc_util", "import ray.serve.schema"):
    try:
        exec(attempt)
    except ImportError as exc:
        print("error:", exc)
    except AttributeError as exc:
        print("error:", exc)
"""


def run(
    python: str, code: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-c", code],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def test_ray_is_not_in_steadyserves_closure() -> None:
    """Else every version's environment would get the controller's Ray linked in."""
    names = {seal.canonical(d.metadata["Name"] or "") for d in seal.lent()}
    assert "steadyserve" in names and "ray" not in names


def test_a_sealed_environment_gets_steadyserves_serve_and_a_stand_in_ray(
    tmp_path: Path,
) -> None:
    environment, _ = asyncio.run(
        eb.ensure(Home(tmp_path / "home"), tmp_path, None, None, dict(os.environ))
    )
    out = run(environment.python, CODE)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "serve ok"
    # ray is SteadyServe's ray.py: ray.init connects nothing, the rest of Ray is absent.
    assert lines[1].startswith("error: ray.remote is not provided here: Ray is not installed")
    assert lines[2].startswith("error: ray.serve.grpc_util is not provided here")
    assert lines[3].startswith("error: ray.serve.schema is not provided here")
    notices = [line for line in out.stderr.splitlines() if line.startswith("notice:")]
    assert notices == [
        "notice: `from ray import serve` is SteadyServe's API here (this environment has no"
        " Ray); see docs/ray-serve-api.md#from-ray-import-serve"
    ]


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs the ray test extra")
def test_a_ray_without_ray_serve_falls_back_with_one_notice() -> None:
    probe = run(sys.executable, "import ray.serve")
    if probe.returncode == 0:
        pytest.skip("this environment has Ray Serve itself")
    out = run(sys.executable, CODE)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "serve ok"
    notices = [line for line in out.stderr.splitlines() if line.startswith("notice:")]
    assert len(notices) == 1 and "import ray.serve failed: " in notices[0]


def test_the_switch_is_checked_and_forces_steadyserves_api() -> None:
    bad = run(sys.executable, CODE, {"STEADY_RAY_SERVE": "maybe"})
    assert bad.returncode != 0
    assert "STEADY_RAY_SERVE='maybe': must be steadyserve or auto" in bad.stderr
    out = run(sys.executable, CODE, {"STEADY_RAY_SERVE": "steadyserve"})
    assert out.returncode == 0, out.stderr
    assert "(STEADY_RAY_SERVE=steadyserve)" in out.stderr
