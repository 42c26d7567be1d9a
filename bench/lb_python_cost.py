"""The load balancer's Python cost per proxied request, without the network.

wrk through the LB measures everything at once (kernel TCP, the event loop, the
Python code) and on a shared machine its numbers move with the other load. This
drives the real ``ClientConnection`` / ``Proxy`` / ``UpstreamConnection`` objects
(real httptools parsing, routing, pooling, metrics) with transports that only
count writes, so what is measured is the Python (and httptools) work of one
request: parse the request, route it, hand it to a pooled replica connection,
parse the response, pass it through, finish the exchange. The time is the
thread's CPU time (``time.thread_time``), so other processes on the machine
barely move it: use it to compare two versions of the hot path.

    python bench/lb_python_cost.py                 # best of 5 runs of 50,000 requests
    python bench/lb_python_cost.py --profile       # plus cProfile's top functions
    python bench/lb_python_cost.py --request-timeout 30   # with request_timeout_s set
    python bench/lb_python_cost.py --policy prefix_affinity --chat-bytes 4096  # an LLM request
    python bench/lb_python_cost.py --blocked-path /-/reconfigure   # a command replica's table
    py-spy record -r 1000 -f raw -o out.txt -- python bench/lb_python_cost.py -n 400000
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from dataclasses import replace
from typing import Any

import uvloop

from steadyserve.lb.balancer import Balancer
from steadyserve.lb.downstream import ClientConnection
from steadyserve.lb.proxy import Proxy
from steadyserve.lb.upstream import UpstreamConnection
from steadyserve.wire.routes import Limits, RouteTable

# What wrk sends, and what bench/hello_replica.py answers.
REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"
RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 13\r\n\r\nHello, world!"


class CountingTransport:
    """Just enough of a transport for the connections: counts writes."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1

    def writelines(self, data: list[bytes]) -> None:
        self.writes += 1

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False


def chat_request(size: int) -> bytes:
    """A POST /v1/chat/completions of about ``size`` bytes: a system prompt and a question."""
    import json

    system = ("You are a careful assistant. " * (size // 28 + 1))[: max(size - 160, 0)]
    body = json.dumps(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": "What is the capital of France?"},
            ],
            "max_tokens": 16,
        }
    ).encode()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"
    head += b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    return head + body


async def measure(
    n: int,
    runs: int,
    profile: bool,
    request_timeout: float | None,
    policy: str = "least_load",
    request: bytes = REQUEST,
    blocked_path: str | None = None,
) -> float:
    table = RouteTable.static("127.0.0.1:9", policy, 100, -1)
    balancer = Balancer(table, policy, 100, -1)
    proxy = Proxy("bench", balancer, limits=Limits(request_timeout_s=request_timeout))
    if blocked_path is not None:  # a command replica's reconfigure_path: checked per request
        proxy.apply_table(replace(table, blocked_paths=frozenset({blocked_path.encode()})))
    replica = balancer.replicas[0]
    upstream = UpstreamConnection(proxy, replica)
    upstream.connection_made(CountingTransport())  # type: ignore[arg-type]
    upstream.in_pool = True
    upstream.idle_since = proxy.now()  # pooled from now (lb/pool.py)
    replica.idle.append(upstream)
    client = ClientConnection(proxy)
    client_transport = CountingTransport()
    client.connection_made(client_transport)  # type: ignore[arg-type]

    def requests(count: int) -> None:
        for _ in range(count):
            client.data_received(request)  # routed to the pooled connection at once
            upstream.data_received(RESPONSE)  # passed through to the client

    requests(2000)  # warm up
    best = float("inf")
    for _ in range(runs):
        started = time.thread_time()
        requests(n)
        best = min(best, (time.thread_time() - started) / n)
    if client_transport.writes < n or proxy.balancer.replicas[0].requests < n:
        raise RuntimeError("requests were not proxied: the harness is out of date")
    if profile:
        prof = cProfile.Profile()
        prof.enable()
        requests(n)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)
    return best * 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("-n", type=int, default=50_000, help="requests per run")
    p.add_argument("--runs", type=int, default=5, help="runs; the fastest is shown")
    p.add_argument("--profile", action="store_true", help="print cProfile's top functions")
    p.add_argument(
        "--request-timeout", type=float, default=None, help="the service's request_timeout_s"
    )
    p.add_argument("--policy", default="least_load", help="the service's load_balancing_policy")
    p.add_argument(
        "--chat-bytes", type=int, default=0, help="send a chat completion of this size, not GET /"
    )
    p.add_argument(
        "--blocked-path", default=None, help="a path the table blocks (e.g. /-/reconfigure)"
    )
    args = p.parse_args()
    request = chat_request(args.chat_bytes) if args.chat_bytes else REQUEST
    us = uvloop.run(
        measure(
            args.n,
            args.runs,
            args.profile,
            args.request_timeout,
            args.policy,
            request,
            args.blocked_path,
        )
    )
    what = f"{args.policy}, {len(request)}-byte request"
    if args.blocked_path:
        what += f", {args.blocked_path} blocked"
    print(f"{us:.2f} us of CPU per proxied request in the load balancer's Python code ({what})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
