"""``python -m steadyserve.lb``: one service's load balancer as its own process.

It is a separate process so that restarting the controller never interrupts
traffic. SIGTERM/SIGINT stop accepting, let in-flight requests finish (at most
about ten seconds) and exit 0; a second signal exits at once. With
``--workers N`` (N > 1) this process supervises N such load balancers on the
same port (lb/workers.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from steadyserve.core.routing.registry import POLICIES
from steadyserve.lb.proxy import SEND_TIMEOUT
from steadyserve.lb.server import LBConfig, LoadBalancer
from steadyserve.lb.workers import supervise
from steadyserve.wire.lb_process import worker_count
from steadyserve.wire.routes import Limits, RouteTable

log = logging.getLogger("steadyserve.lb")


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def _queue_limit(text: str) -> int:
    value = int(text)
    if value < -1:
        raise argparse.ArgumentTypeError(f"must be -1 (unbounded) or >= 0, got {value}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value < 65536:
        raise argparse.ArgumentTypeError(f"not a TCP port: {value}")
    return value


def _listen_fds(text: str) -> list[int]:
    try:
        fds = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a descriptor list: {text!r}") from None
    if any(fd < 0 for fd in fds):
        raise argparse.ArgumentTypeError(f"not a descriptor list: {text!r}")
    return fds


def _shared_load(text: str) -> tuple[int, int, int]:
    parts = text.split(":")
    if len(parts) != 3 or not all(p.isdigit() for p in parts) or int(parts[1]) >= int(parts[2]):
        raise argparse.ArgumentTypeError(f"expected FD:INDEX:WORKERS, got {text!r}")
    return int(parts[0]), int(parts[1]), int(parts[2])


def _workers(text: str) -> int:
    if text == "auto":
        return worker_count("auto")
    return _positive_int(text)


def _interval(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m steadyserve.lb", description="SteadyServe load balancer for one service."
    )
    p.add_argument("--service", required=True, help="service name")
    p.add_argument("--port", required=True, type=_port, help="port to listen on (0: any)")
    p.add_argument("--home", required=True, help="STEADY_HOME of the controller")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument(
        "--static-routes",
        default=None,
        help="host:port,host:port — fixed replicas; no controller is polled",
    )
    p.add_argument("--policy", default="least_load", choices=sorted(POLICIES))
    p.add_argument(
        "--max-ongoing",
        type=_positive_int,
        default=100,
        help="per-replica in-flight limit (until the controller says otherwise)",
    )
    p.add_argument(
        "--max-queued",
        type=_queue_limit,
        default=-1,
        help="queued requests beyond which 503 is answered (-1: unbounded)",
    )
    p.add_argument("--max-header-bytes", type=_positive_int, default=65536)
    p.add_argument("--max-body-bytes", type=_positive_int, default=104857600)
    p.add_argument("--report-interval", type=_interval, default=0.5)
    defaults = Limits()
    p.add_argument(
        "--header-timeout",
        type=_interval,
        default=defaults.header_timeout_s,
        help="seconds a client has to send a request head",
    )
    p.add_argument(
        "--body-timeout",
        type=_interval,
        default=defaults.body_timeout_s,
        help="seconds a request body may go without a byte",
    )
    p.add_argument(
        "--idle-timeout",
        type=_interval,
        default=defaults.idle_timeout_s,
        help="seconds an idle keep-alive client connection is kept",
    )
    p.add_argument(
        "--max-connections",
        type=_positive_int,
        default=defaults.max_connections,
        help="client connections held at once (also capped below the fd limit)",
    )
    p.add_argument(
        "--send-timeout",
        type=_interval,
        default=SEND_TIMEOUT,
        help="seconds a client may read nothing of its response before it is disconnected",
    )
    p.add_argument(
        "--request-timeout",
        type=_interval,
        default=None,
        help="seconds a replica has to complete a response (default: no limit)",
    )
    p.add_argument(
        "--metrics-port", type=_port, default=0, help="loopback port of /metrics (0: any free)"
    )
    p.add_argument("--access-log", default=None, help="log every request to this file")
    p.add_argument(
        "--listen-fd",
        type=_listen_fds,
        default=None,
        help="serve on this inherited, already listening socket instead of binding"
        " (with --workers: one per worker, comma-separated)",
    )
    p.add_argument(
        "--workers",
        type=_workers,
        default=1,
        help="load-balancer processes sharing the port with SO_REUSEPORT ('auto': cores / 2)",
    )
    p.add_argument("--worker-of", type=int, default=None, help=argparse.SUPPRESS)
    # A worker's shared in-flight counts: FD:INDEX:WORKERS (lb/shared_load.py).
    p.add_argument("--shared-load", type=_shared_load, default=None, help=argparse.SUPPRESS)
    return p


def parse_config(argv: Sequence[str] | None = None) -> LBConfig:
    args = build_parser().parse_args(argv)
    config = LBConfig(
        service=args.service,
        port=args.port,
        home=Path(args.home),
        host=args.host,
        static_routes=args.static_routes,
        policy=args.policy,
        max_ongoing=args.max_ongoing,
        max_queued=args.max_queued,
        max_header_bytes=args.max_header_bytes,
        max_body_bytes=args.max_body_bytes,
        report_interval=args.report_interval,
        listen_fds=tuple(args.listen_fd or ()),
        workers=args.workers,
        worker_of=args.worker_of,
        shared_load=args.shared_load,
        send_timeout=args.send_timeout,
        limits=Limits(
            header_timeout_s=args.header_timeout,
            body_timeout_s=args.body_timeout,
            idle_timeout_s=args.idle_timeout,
            max_connections=args.max_connections,
            request_timeout_s=args.request_timeout,
        ),
        metrics_port=args.metrics_port,
        access_log=Path(args.access_log) if args.access_log else None,
    )
    if config.static_routes is not None:
        try:
            RouteTable.static(config.static_routes, config.policy, 1, -1)
        except ValueError as exc:
            build_parser().error(str(exc))
    if config.listen_fds and len(config.listen_fds) < config.workers:
        build_parser().error(
            f"--listen-fd: {len(config.listen_fds)} sockets for {config.workers} workers"
        )
    return config


async def serve(config: LBConfig) -> None:
    lb = LoadBalancer(config)
    await lb.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = 0

    first_signal = 0.0

    def on_signal() -> None:
        nonlocal signals, first_signal
        if config.worker_of is not None and signals and loop.time() - first_signal < 1.0:
            return  # a worker gets the group's signal and its supervisor's: one stop
        signals += 1
        if signals > 1:
            os._exit(0)
        first_signal = loop.time()
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    print(
        f"steady-lb: service {config.service!r} listening on "
        f"http://{config.host}:{lb.port} (pid {os.getpid()}; "
        f"metrics on http://127.0.0.1:{lb.observe.server.port}/metrics)",
        flush=True,
    )
    if config.worker_of is None:
        await stop.wait()
    else:
        # A worker whose supervisor is gone (killed outright) stops on its own.
        while os.getppid() == config.worker_of and not stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
    log.info("stopping: draining in-flight requests")
    await lb.stop()


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_config(argv)
    if config.workers > 1:
        return supervise(
            sys.argv[1:] if argv is None else argv,
            config.listen_fds,
            config.host,
            config.port,
            config.workers,
            config.metrics_port,
        )
    logging.basicConfig(
        level=os.environ.get("STEADY_LB_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s lb[%(process)d] %(message)s",
        stream=sys.stderr,
    )
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; stay usable without
        runner = asyncio.run
    else:
        runner = uvloop.run
    try:
        runner(serve(config))
    except OSError as exc:
        print(f"steady-lb: cannot listen on {config.host}:{config.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
