"""PID 1 of an isolated replica's PID namespace: start the replica, pass it the
signals that stop it, reap every orphan, and end with it.

The kernel delivers a signal to a PID namespace's first process only when that
process handles it, and re-parents every orphan of the namespace to it: a ``run:``
that were PID 1 itself would ignore the controller's SIGTERM (no handler: the
default action does not apply to PID 1) and collect zombies. So this small init
is PID 1 instead (as ``tini`` is in a container): it runs the replica in a
process group of its own, forwards SIGTERM (and SIGINT, SIGHUP, SIGQUIT, SIGUSR1,
SIGUSR2) to that group once, reaps whatever is re-parented to it, and exits with
the replica's status as soon as the replica's first process exits; the kernel
then ends everything left in the namespace.

It arrives with SIGTERM ignored (the host side of the sandbox must outlive the
controller's SIGTERM to the replica's group, sandbox.py): the handler installed
here replaces that, and the replica starts with every signal at its default.

Only the standard library, run as ``python -I -S sandbox_init.py COMMAND...``:
nothing of the package is imported inside the sandbox.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


def exit_status(status: int) -> int:
    """A shell's exit code for a wait status: the code, or 128 + the signal."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


def main(argv: list[str]) -> int:
    if not argv:
        print("sandbox_init: no command", file=sys.stderr)
        return 2
    child = 0

    def forward(signum: int, _frame: object) -> None:
        if child > 0:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child, signum)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    child = os.fork()
    if child == 0:
        try:
            os.setpgid(0, 0)
            for sig in FORWARDED:
                signal.signal(sig, signal.SIG_DFL)
            os.execvp(argv[0], argv)
        except OSError as exc:
            print(f"sandbox_init: cannot run {argv[0]}: {exc.strerror}", file=sys.stderr)
        os._exit(127)
    # As the child does: the group exists before the first forward (an error: the
    # child already ran its command, or exited).
    with contextlib.suppress(OSError):
        os.setpgid(child, child)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 0
        if pid == child:
            return exit_status(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
