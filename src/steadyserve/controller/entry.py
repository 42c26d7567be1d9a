"""The controller process's entry: take the home's lock, then serve until SIGTERM.

Apart from the daemon so that what a second controller does is one short,
readable decision: started on demand by a CLI it yields quietly (two CLIs
raced), run by hand or by a service manager it says so and exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import logging
import os
import sys
from typing import IO

import uvloop

from steadyserve import port_range
from steadyserve.backends import BackendChoiceError
from steadyserve.controller import recovery
from steadyserve.controller.clock import SYSTEM_CLOCK
from steadyserve.controller.daemon import Controller
from steadyserve.controller.recovery import StateRefused
from steadyserve.home import full_disk
from steadyserve.home.paths import Home, make_files_private
from steadyserve.oneline import one_line

log = logging.getLogger("steadyserve.controller")
START_REPORT_ENV = "STEADY_START_REPORT_FD"
"""A pipe the CLI that starts a controller reads the one line of a failed start from."""


def _take_lock(home: Home) -> IO[str] | None:
    handle = open(home.controller_lock, "a")  # noqa: SIM115 - held for the process's life
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return handle


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m steadyserve.controller")
    parser.add_argument("--home", default=None)
    parser.add_argument(
        "--on-demand",
        action="store_true",
        help="started by a CLI: another controller holding the home is success (exit 0)",
    )
    args = parser.parse_args(argv)
    report = os.environ.pop(START_REPORT_ENV, None)  # not for the processes it starts
    make_files_private()  # the home's folders 0700, its files 0600 (docs/security.md)
    home = Home.from_env(args.home).ensure()
    os.environ["STEADY_HOME"] = str(home.root)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    lock = _take_lock(home)
    if lock is None:
        if args.on_demand:  # two CLIs raced to start it: the other one's controller serves
            log.info("another controller holds %s; exiting", home.controller_lock)
            return 0
        # Run by hand or by a service manager: a second controller is a mistake to
        # report, not a success (exit 0 under Restart=always would loop silently).
        holder = home.read_controller_info() or {}
        pid = f" (pid {holder['pid']})" if holder.get("pid") else ""
        print(
            f"error: another controller{pid} holds {home.root}; stop it first"
            " (steady controller stop)",
            file=sys.stderr,
            flush=True,
        )
        return 1
    try:
        port_range.from_env()  # a bad STEADY_PORTS: one line, before anything binds
        for note in recovery.prepare(home, SYSTEM_CLOCK.wall()):
            log.warning("%s", note)
        uvloop.run(Controller(home).serve())
    except (BackendChoiceError, port_range.PortRangeError) as exc:  # the CLI says it, exit 2
        return _failed(report, str(exc), 2)
    except StateRefused as exc:
        return _failed(report, str(exc), 1)
    except Exception as exc:  # the exception that stopped it, not the log's last line
        log.exception("controller failed")
        if full_disk.is_full(exc, home.root):
            return _failed(report, full_disk.line(home.root, f"cannot start ({one_line(exc)})"), 1)
        return _failed(report, one_line(exc), 1)
    finally:
        lock.close()
    return 0


def _failed(report: str | None, reason: str, code: int) -> int:
    """Say in one line why the controller did not start: on the channel the CLI that
    started it reads (it works when the disk is full), and as the log's last line."""
    line = f"error: {reason}\n"
    if report is not None and report.isdigit():
        with contextlib.suppress(OSError):
            os.write(int(report), line.encode())
    with contextlib.suppress(OSError):
        sys.stderr.write(line)
        sys.stderr.flush()
    return code
