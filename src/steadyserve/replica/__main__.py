"""``python -m steadyserve.replica [--describe] module.sub:attr``.

Run by the controller with the service's workdir as cwd and its settings in the
environment (see ``settings``). Exit codes: 0 stopped by a signal (or
``--describe`` succeeded); 1 the replica cannot run (import failure, ``__init__``
or the first ``reconfigure`` raised, a ``user_config`` with no ``reconfigure`` to
take it, a port cannot be bound, an ASGI lifespan startup failed); 2 bad
arguments or environment, or ``--describe`` could not import the path.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import threading
from collections.abc import Sequence

from steadyserve.replica.loader import LoadError, Target, load
from steadyserve.replica.settings import SettingsError, from_env
from steadyserve.serve import ray_alias
from steadyserve.wire import replica_contract as contract

PROG = "steadyserve.replica"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"python -m {PROG}",
        description="Host a Python class or ASGI app as a SteadyServe replica.",
    )
    parser.add_argument(
        "--describe",
        action="store_true",
        help="import only; print {kind, options} as JSON and exit",
    )
    parser.add_argument("import_path", help="module.sub:attr, imported from the current directory")
    args = parser.parse_args(argv)

    # Taken out before any user code is imported: neither it nor its children see it.
    secret = os.environ.pop(contract.CONTROL_SECRET, None)
    graph_secret = os.environ.pop(contract.GRAPH_SECRET, None)
    _put_cwd_first()
    try:
        ray_alias.install()  # `from ray import serve` as written (serve/ray_alias.py)
    except ray_alias.AliasError as exc:
        _say(str(exc))
        return 2
    try:
        if args.describe:  # stdout carries only the JSON, whatever the module prints
            with contextlib.redirect_stdout(sys.stderr):
                target = load(args.import_path)
        else:
            target = load(args.import_path)
    except LoadError as exc:
        _say(str(exc))
        return 2 if args.describe else 1
    if args.describe:
        print(json.dumps(target.describe()), flush=True)
        return 0
    return _run(target, secret, graph_secret)


def _run(target: Target, secret: str | None, graph_secret: str | None = None) -> int:
    env = dict(os.environ)
    if secret:
        env[contract.CONTROL_SECRET] = secret
    if graph_secret:
        from steadyserve.serve.handle import set_graph_secret

        env[contract.GRAPH_SECRET] = graph_secret
        set_graph_secret(graph_secret)  # this replica's handles may send pickle
    try:
        settings = from_env(env, target.options)
    except SettingsError as exc:
        _say(str(exc))
        return 2
    if settings.user_config is not None and not target.describe()["has_reconfigure"]:
        what = "an ASGI app" if not target.is_class else "a class"
        _say(
            f"a user_config is set but {target.import_path!r} is {what} without "
            f"a reconfigure(self, user_config) method to receive it"
        )
        return 1

    import uvloop  # the server stack is imported only when a replica really runs

    from steadyserve.replica.server import ReplicaServer

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return uvloop.run(ReplicaServer(target, settings).run())


def _put_cwd_first() -> None:
    """The workdir's modules win over same-named installed ones, as with ``python -c``."""
    cwd = os.getcwd()
    if not sys.path or sys.path[0] not in ("", cwd):
        sys.path.insert(0, cwd)


def _say(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def _exit(code: int) -> None:
    """Exit; without waiting for request threads a user's ``__call__`` left stuck
    (their pool's threads are not daemons and would hold the process forever)."""
    sys.stdout.flush()
    sys.stderr.flush()
    stuck = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if stuck:
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    _exit(main())
