"""The controller process's entry: take the home's lock, then serve until SIGTERM.

Apart from the daemon so that what a second controller does is one short,
readable decision: started on demand by a CLI it yields quietly (two CLIs
raced), run by hand or by a service manager it says so and exits 1.
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import sys
from typing import IO

import uvloop

from steadyserve.backends import BackendChoiceError
from steadyserve.controller.daemon import Controller
from steadyserve.home.paths import Home, make_files_private

log = logging.getLogger("steadyserve.controller")


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
        controller = Controller(home)
    except BackendChoiceError as exc:
        # The CLI that started this controller shows this line and exits 2.
        print(f"error: {exc}", file=sys.stderr, flush=True)
        lock.close()
        return 2
    uvloop.run(controller.serve())
    lock.close()
    return 0
