"""A class with a streaming ``@serve.batch`` method, defined inside a function and
shipped by value as ``serve.run`` ships it, then run in a fresh interpreter as a
replica runs it: every caller gets its items and its stream ends (the end marker
once travelled with the pickled closure as a copy, and leaked out as an item)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from steadyserve import serve
from steadyserve.serve import shipped

REPLICA_SIDE = """
import asyncio
from steadyserve.serve import shipped

app = shipped.app

async def main():
    textgen = app.deployment.func_or_class()

    async def read(prompt):
        return [item async for item in textgen.batch_handler(prompt)]

    calls = [read(f"hola{i}") for i in range(4)]
    return await asyncio.wait_for(asyncio.gather(*calls), 10)

print(asyncio.run(main()))
"""


def _app() -> Any:
    class Textgen:
        @serve.batch(max_batch_size=4, batch_wait_timeout_s=1000)  # type: ignore[untyped-decorator]
        async def batch_handler(self, prompts: list[str]) -> Any:
            for _ in range(3):
                yield prompts

    return serve.deployment(Textgen).bind()


def test_a_shipped_streaming_batch_ends_each_callers_stream(tmp_path: Path) -> None:
    shipped.write(_app(), tmp_path, {})
    done = subprocess.run(
        [sys.executable, "-c", REPLICA_SIDE],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str([[f"hola{i}"] * 3 for i in range(4)])
