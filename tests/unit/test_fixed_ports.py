"""Finding a replica that listens on a fixed port instead of its $PORT."""

from __future__ import annotations

import subprocess
import sys
import time

from steadyserve.controller.fixed_ports import PortWatch, listening_ports, wrong_port_notice

LISTENER = (
    "import socket, sys, time\n"
    "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
    "print(s.getsockname()[1], flush=True); time.sleep(60)\n"
)


def test_listening_ports_cover_the_process_tree() -> None:
    # bash -> python: the port is held by a child, as with `run: python3 server.py`.
    proc = subprocess.Popen(
        ["bash", "-c", f'{sys.executable} -c "$CODE"; true'],
        env={"CODE": LISTENER, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        found: set[int] = set()
        deadline = time.monotonic() + 10
        while port not in found and time.monotonic() < deadline:
            found = listening_ports(proc.pid)
        assert port in found
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert listening_ports(proc.pid) == set()


def test_notice_only_when_listening_elsewhere() -> None:
    assert wrong_port_notice(2, 41213, []) is None  # still starting: nothing to say
    assert wrong_port_notice(2, 41213, [41213, 9000]) is None
    assert wrong_port_notice(2, 41213, [8080]) == (
        "replica 2 listens on 8080, not on its $PORT 41213: use --port $PORT; see docs/skyserve.md"
    )


def test_watch_reports_once_and_reads_proc_at_most_every_second() -> None:
    now = [0.0]
    reads: list[int] = []
    recorded: list[tuple[int, str]] = []

    def ports_of(pid: int) -> set[int]:
        reads.append(pid)
        return set() if len(reads) == 1 else {8080}

    watch = PortWatch(lambda rid, n: recorded.append((rid, n)), lambda: now[0], ports_of)
    watch.check(1, 100, 41213)  # not listening yet
    watch.check(1, 100, 41213)  # too soon: /proc not read again
    assert reads == [100] and recorded == []
    now[0] = 1.5
    watch.check(1, 100, 41213)
    now[0] = 5.0
    watch.check(1, 100, 41213)  # already reported
    assert len(reads) == 2 and [rid for rid, _ in recorded] == [1]
    assert watch.notices[1].startswith("replica 1 listens on 8080")
    watch.forget(1)
    assert watch.notices == {}
