"""An open-loop, constant-rate HTTP load generator that records every request.

Request i is sent at ``start + i / rate`` whether or not earlier ones have
answered (no coordinated omission), so a stall shows up as latency, not as
fewer requests. Each record keeps the send time (wall clock, comparable across
processes), the latency measured from the *scheduled* time, the status, and
which version / config / replica answered (from a JSON body with ``version``,
``message`` and ``replica_id``, as examples/http_server answers).

    python bench/loadgen.py --url http://127.0.0.1:30001/ --rate 200 \\
        --max-seconds 60 --out records.json

It stops by itself after ``--max-seconds`` (or at SIGTERM/SIGINT), waits for
the requests in flight (at most ``--timeout``), writes ``--out`` and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp
import uvloop


@dataclass
class Record:
    sent: float  # wall-clock time the request was scheduled for (time.time())
    latency_ms: float  # from the scheduled time to the end of the body
    status: int  # 0: no HTTP answer (see error)
    version: str
    message: str
    replica: str
    error: str

    @property
    def ok(self) -> bool:
        return self.status == 200 and not self.error

    @property
    def label(self) -> str:
        """Which code version and config answered, e.g. ``v2 cfg-1``."""
        return f"v{self.version} {self.message}" if self.ok else "failed"


async def _one(session: aiohttp.ClientSession, url: str, scheduled: float, wall: float) -> Record:
    version = message = replica = error = ""
    status = 0
    try:
        async with session.get(url) as resp:
            status = resp.status
            body = await resp.read()
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if isinstance(data, dict):
            version = str(data.get("version", ""))
            message = str(data.get("message", ""))
            replica = str(data.get("replica_id", ""))
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        error = type(exc).__name__
    latency = (time.perf_counter() - scheduled) * 1000
    return Record(wall, latency, status, version, message, replica, error)


async def generate(url: str, rate: float, max_seconds: float, timeout: float) -> list[Record]:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30)
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    tasks: list[asyncio.Task[Record]] = []
    async with aiohttp.ClientSession(connector=connector, timeout=client_timeout) as session:
        start, wall0 = time.perf_counter(), time.time()
        print(f"loadgen: {rate:g} req/s to {url}", flush=True)
        i = 0
        while not stop.is_set():
            offset = i / rate
            if offset > max_seconds:
                break
            delay = start + offset - time.perf_counter()
            if delay > 0:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
                if stop.is_set():
                    break
            tasks.append(asyncio.create_task(_one(session, url, start + offset, wall0 + offset)))
            i += 1
        return list(await asyncio.gather(*tasks))


def load(path: Path) -> list[Record]:
    return [Record(**row) for row in json.loads(path.read_text())]


def save(records: Sequence[Record], path: Path) -> None:
    path.write_text(json.dumps([asdict(r) for r in records]))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--url", required=True)
    p.add_argument("--rate", type=float, default=200.0, help="requests per second")
    p.add_argument("--max-seconds", type=float, default=60.0)
    p.add_argument("--timeout", type=float, default=10.0, help="per request, seconds")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if not args.url.startswith(("http://127.", "http://localhost")):
        p.error("--url must be on 127.0.0.0/8: this tool loads only this machine")
    records = uvloop.run(generate(args.url, args.rate, args.max_seconds, args.timeout))
    save(records, args.out)
    failed = sum(1 for r in records if not r.ok)
    print(f"loadgen: {len(records)} requests, {failed} failed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
