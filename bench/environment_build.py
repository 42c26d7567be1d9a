"""What a per-version environment costs: building one, and reusing it, with uv and
with venv + pip (a package from a local wheel, so no network is involved).

    python bench/environment_build.py --runs 3

Prints the median build and reuse time per tool, for a version with
``pip: [pinme==1.0]`` and for a setup-only version (``setup: true``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.helpers.wheels import make_wheel, offline_env  # noqa: E402

from steadyserve.envs import build as eb  # noqa: E402
from steadyserve.home.paths import Home  # noqa: E402


def once(tool: str, pip: list[str] | None, setup: str | None) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="steady-bench-env-") as raw:
        tmp = Path(raw)
        (tmp / "wd").mkdir()
        make_wheel(tmp / "wheels", "pinme", "1.0")
        env = dict(os.environ, **offline_env(tmp / "wheels"))
        uv = shutil.which("uv")
        if tool == "pip" and uv:
            hidden = os.path.dirname(uv)
            env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != hidden)
        home = Home(tmp / "home")
        start = time.monotonic()
        asyncio.run(eb.ensure(home, tmp / "wd", setup, pip, env))
        built = time.monotonic() - start
        start = time.monotonic()
        asyncio.run(eb.ensure(home, tmp / "wd", setup, pip, env))
        return built, time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    tools = ["uv", "pip"] if shutil.which("uv") else ["pip"]
    cases = (("pip: [pinme==1.0]", ["pinme==1.0"], None), ("setup: true", None, "true"))
    print(f"{'tool':4}  {'version has':18}  {'build (median)':>14}  {'reuse (median)':>14}")
    for tool in tools:
        for label, pip, setup in cases:
            runs = [once(tool, pip, setup) for _ in range(args.runs)]
            build = statistics.median(r[0] for r in runs) * 1000
            reuse = statistics.median(r[1] for r in runs) * 1000
            print(f"{tool:4}  {label:18}  {build:11.0f} ms  {reuse:11.1f} ms")


if __name__ == "__main__":
    main()
