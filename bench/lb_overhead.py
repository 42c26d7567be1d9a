"""How much of a replica's direct throughput the load balancer keeps, next to Ray Serve.

In one run, with wrk (-t1) at each connection count:
  * direct to one hello replica (bench/hello_replica.py),
  * through SteadyServe with 1 and 2 replicas, brought up with the real
    ``steady up`` in a temporary STEADY_HOME (a service file running
    ``hello_replica.py --port $PORT``),
for each replica kind: ``uvloop`` (uvloop + httptools, the fastest Python
replica), ``asyncio`` (the same protocol on the default asyncio loop: the
"minimal asyncio hello replica" of docs/design.md's performance
targets) and ``aiohttp`` (an
aiohttp web app: the speed of a typical framework replica), and, as the
yardsticks, the best C proxies in front of the same replica: nginx (one worker,
upstream keep-alive) and HAProxy (one thread, ``http-reuse always``), each run
in the foreground from a config generated into a temp dir (see
bench/README.md; ``bench/setup.sh`` installs them from Debian's packages; a
proxy that is not installed gets a "not installed" row). Then an SSE stream
(a replica that writes N events): time to first byte and per-event delivery
delay, direct and through the load balancer. Then, when ``ray[serve]`` is
installed, the same wrk runs through Ray Serve's proxy (1 and 2 replicas of a
trivial deployment), inside a loopback-only network namespace.
Where the machine gives network namespaces (root, slirp4netns), SteadyServe's
rows run twice in the same run: replicas on the host's network, and replicas
each in a namespace of its own (``service.isolation: network``; ``--no-isolation``
skips them), so the isolation's per-request cost is read side by side.

    python bench/lb_overhead.py --duration 5
    python bench/lb_overhead.py --duration 4 --rounds 3 --kinds asyncio --replicas 1 --no-sse

Besides the full table, "proxies side by side" compares, per replica kind, the
p50 at 1 connection, req/s and the proxy's CPU per request at each connection
count for direct, nginx, HAProxy, SteadyServe's LB (1 replica) and Ray Serve,
with the ratios SteadyServe/nginx and SteadyServe/HAProxy.

Prints the tables and writes bench/out/lb_overhead.png. Everything it starts
is stopped at the end (also on Ctrl-C).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop
from benchlib import (
    HERE,
    PROXIES,
    ProxyUnavailable,
    SteadyHome,
    WrkResult,
    cpu_seconds,
    fmt,
    have_wrk,
    machine_line,
    percentile,
    plot_path,
    pyplot,
    ray_problem,
    rss_mb,
    run_in_netns,
    run_proxy,
    run_wrk,
    service_yaml,
    steady_home,
    table,
)

from steadyserve.backends import netns


@dataclass
class Row:
    kind: str  # replica kind: uvloop | asyncio | aiohttp | ray
    target: str  # direct | nginx | haproxy | steady | ray
    replicas: int
    connections: int
    result: WrkResult


# SteadyServe -----------------------------------------------------------------
# How each replica kind runs bench/hello_replica.py.
KIND_ARGS = {
    "uvloop": "--loop uvloop",
    "asyncio": "--loop asyncio",
    "aiohttp": "--server aiohttp --loop uvloop",
}


def up_hello_services(
    home: SteadyHome, kinds: list[str], counts: list[int], isolated: bool = False
) -> None:
    """One service per kind and count; with ``isolated``, each also as
    ``hello-KIND-N-net`` whose replicas have networks of their own
    (``service.isolation: network``, docs/isolation.md)."""
    app = home.tmp / "app"
    app.mkdir()
    shutil.copy(HERE / "hello_replica.py", app / "hello_replica.py")
    for kind in kinds:
        for n in counts:
            for net in (False, True) if isolated else (False,):
                name = f"hello-{kind}-{n}" + ("-net" if net else "")
                svc: dict[str, Any] = {"readiness_probe": "/", "replicas": n}
                svc.update(health_check_period_s=10, isolation="network" if net else "none")
                spec = {
                    "name": name,
                    "service": svc,
                    "workdir": str(app),
                    "run": f"{sys.executable} hello_replica.py --port $PORT {KIND_ARGS[kind]}",
                }
                home.run("up", str(home.write(f"{name}.yaml", service_yaml(spec))), "--wait")


def endpoint_port(svc: dict[str, Any]) -> int:
    return int(str(svc["endpoint"]).rsplit(":", 1)[1])


def measure_steady(args: argparse.Namespace, home: SteadyHome) -> tuple[list[Row], dict[str, Any]]:
    kinds, counts = args.kinds.split(","), [int(x) for x in args.replicas.split(",")]
    conns = [int(x) for x in args.connections.split(",")]
    up_hello_services(home, kinds, counts, args.isolation)
    services = {s["name"]: s for s in home.status()}
    rows: list[Row] = []
    extra: dict[str, Any] = {"lb_rss_mb": {}, "proxy_labels": {}, "proxy_notes": {}}
    for kind in kinds:
        first = services[f"hello-{kind}-{counts[0]}"]
        replica = first["replicas"][0]
        replica_pids = [replica["pid"]]
        targets: list[Target] = [
            Target("direct", 1, f"http://127.0.0.1:{replica['port']}/", [], replica_pids)
        ]
        with contextlib.ExitStack() as proxies:
            # nginx and HAProxy in front of the very replica "direct" measures.
            for key in args.proxies:
                try:
                    proxy = proxies.enter_context(run_proxy(key, int(replica["port"])))
                except ProxyUnavailable as e:
                    extra["proxy_notes"][(kind, key)] = str(e)
                    continue
                extra["proxy_labels"][key] = proxy.label
                url = f"http://127.0.0.1:{proxy.port}/"
                targets.append(Target(key, 1, url, proxy.pids(), replica_pids))
            for n in counts:
                svc = services[f"hello-{kind}-{n}"]
                url = f"http://127.0.0.1:{endpoint_port(svc)}/"
                pids = [r["pid"] for r in svc["replicas"]]
                targets.append(Target("steady", n, url, [svc["load_balancer_pid"]], pids))
                if args.isolation:
                    net = services[f"hello-{kind}-{n}-net"]
                    url = f"http://127.0.0.1:{endpoint_port(net)}/"
                    pids = [r["pid"] for r in net["replicas"]]
                    lb = [net["load_balancer_pid"]]
                    targets.append(Target("steady-net", n, url, lb, pids))
            for c in conns:
                runs: dict[tuple[str, int], list[WrkResult]] = {}
                for t in targets:
                    run_wrk(t.url, c, 1, args.threads)  # warm up (and fill the proxy's pool)
                for _ in range(args.rounds):
                    for t in targets:
                        runs.setdefault((t.target, t.replicas), []).append(
                            wrk_with_cpu(t, c, args.duration, args.threads)
                        )
                for (target, n), results in runs.items():
                    rows.append(Row(kind, target, n, c, median(results)))
        for n in counts:
            svc = services[f"hello-{kind}-{n}"]
            extra["lb_rss_mb"][f"{kind}-{n}"] = rss_mb(svc.get("load_balancer_pid"))
    if args.sse:
        kind = kinds[0]
        svc = services[f"hello-{kind}-{counts[0]}"]
        direct, via_lb = int(svc["replicas"][0]["port"]), endpoint_port(svc)
        extra["sse"] = uvloop.run(measure_sse(args, direct, via_lb))
        extra["sse_kind"] = kind
    return rows, extra


@dataclass
class Target:
    target: str  # direct | nginx | haproxy | steady
    replicas: int
    url: str
    proxy_pids: list[int]  # the proxy's processes (with their children); none for direct
    replica_pids: list[int]


def wrk_with_cpu(t: Target, connections: int, duration: float, threads: int) -> WrkResult:
    """A wrk run, with the CPU time the proxy and the replicas spent per request."""
    proxy_before = cpu_seconds(t.proxy_pids)
    replicas_before = cpu_seconds(t.replica_pids)
    result = run_wrk(t.url, connections, duration, threads)
    if result.requests:
        if t.proxy_pids:
            result.proxy_us = (cpu_seconds(t.proxy_pids) - proxy_before) / result.requests * 1e6
        result.replica_us = (cpu_seconds(t.replica_pids) - replicas_before) / result.requests * 1e6
    return result


def median(runs: list[WrkResult]) -> WrkResult:
    """The run with the median req/s (its latencies come with it)."""
    return sorted(runs, key=lambda r: r.rps)[len(runs) // 2]


# SSE -------------------------------------------------------------------------
async def sse_stream(port: int, n: int, interval: float) -> tuple[float, list[float], float]:
    """One stream on a fresh connection: (time to first event ms, per-event delays ms,
    seconds from the first event to the last)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic_ns()
    writer.write(
        f"GET /sse?n={n}&interval={interval} HTTP/1.1\r\nHost: bench\r\n"
        "Connection: close\r\n\r\n".encode()
    )
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"SSE answered {head[:40]!r}")
    buffered = b""
    arrivals: list[int] = []
    delays: list[float] = []
    while True:
        size = int((await reader.readline()).strip() or b"0", 16)
        if size == 0:
            break
        buffered += (await reader.readexactly(size + 2))[:-2]
        now = time.monotonic_ns()
        while b"\n\n" in buffered:
            event, buffered = buffered.split(b"\n\n", 1)
            _, _, stamp = event.decode().split(" ")
            arrivals.append(now)
            delays.append((now - int(stamp)) / 1e6)
    writer.close()
    return (arrivals[0] - started) / 1e6, delays, (arrivals[-1] - arrivals[0]) / 1e9


async def measure_sse(args: argparse.Namespace, direct: int, via_lb: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    targets = (("direct", direct), ("steady", via_lb))
    streams = max(3, int(args.duration * 10))
    for _, port in targets:
        await sse_stream(port, 2, 0)  # warm up
    for target, port in targets:
        ttfb, delays = [], []
        for _ in range(streams):
            first, per_event, _ = await sse_stream(port, args.sse_events, args.sse_interval)
            ttfb.append(first)
            delays.extend(per_event[1:])
        _, _, burst_s = await sse_stream(port, args.sse_burst, 0)
        out[target] = {
            "streams": streams,
            "ttfb_p50": percentile(ttfb, 50),
            "ttfb_p99": percentile(ttfb, 99),
            "delay_p50": percentile(delays, 50),
            "delay_p99": percentile(delays, 99),
            "burst_events_per_s": args.sse_burst / burst_s if burst_s > 0 else float("nan"),
        }
    return out


# Ray Serve -------------------------------------------------------------------
def measure_ray(args: argparse.Namespace) -> tuple[list[Row], str]:
    problem = ray_problem()
    if problem:
        return [], f"Ray Serve skipped: {problem}"
    with tempfile.TemporaryDirectory(prefix="steady-bench-ray-") as tmp:
        out = Path(tmp) / "ray.json"
        log = Path(tmp) / "ray.log"
        argv = [
            sys.executable,
            str(HERE / "ray_side.py"),
            "lb",
            "--duration",
            str(args.duration),
            "--connections",
            args.connections,
            "--replicas",
            args.replicas,
            "--threads",
            str(args.threads),
            "--out",
            str(out),
        ]
        proc = run_in_netns(argv, timeout=900, log=log)
        if proc.returncode != 0 or not out.exists():
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            return [], f"Ray Serve failed (exit {proc.returncode}):\n{tail}"
        data = json.loads(out.read_text())
    rows = [
        Row(
            "ray",
            "ray",
            r["replicas"],
            r["connections"],
            WrkResult(r["rps"], r["p50_ms"], r["p99_ms"], r["errors"]),
        )
        for r in data["rows"]
    ]
    return rows, f"Ray Serve {data['ray_version']} (proxy on 127.0.0.1:8000, in a loopback netns)"


# report ----------------------------------------------------------------------
def report(rows: list[Row], extra: dict[str, Any], ray_note: str, args: argparse.Namespace) -> None:
    direct = {(r.kind, r.connections): r.result for r in rows if r.target == "direct"}
    fast = args.kinds.split(",")[0]
    out = []
    for r in rows:
        base = direct.get((r.kind if r.kind != "ray" else fast, r.connections))
        share = f"{r.result.rps / base.rps * 100:.0f}%" if base and base.rps else "-"
        added = f"{r.result.p50_ms - base.p50_ms:+.3f}" if base and r.target != "direct" else ""
        replica = "ray deployment" if r.kind == "ray" else f"{r.kind} hello"
        out.append(
            [
                target_name(r.target, extra),
                replica,
                str(r.replicas),
                str(r.connections),
                f"{r.result.rps:.0f}",
                f"{r.result.p50_ms:.3f}",
                f"{r.result.p99_ms:.3f}",
                share,
                added,
                fmt(r.result.proxy_us, 1),
                fmt(r.result.replica_us, 1),
                r.result.errors,
            ]
        )
    print(
        f"wrk -t{args.threads}, {max(1, round(args.duration))}s per run, median of "
        f"{args.rounds}; {machine_line()}"
    )
    print(
        table(
            [
                "target",
                "replica",
                "replicas",
                "conns",
                "req/s",
                "p50 ms",
                "p99 ms",
                "of direct",
                "+p50 ms",
                "proxy CPU us/req",
                "replica CPU us/req",
                "errors",
            ],
            out,
        )
    )
    for (kind, key), note in extra["proxy_notes"].items():
        print(f"{PROXIES[key].name} in front of the {kind} hello replica: {note}")
    lb_rss = ", ".join(f"{k}: {fmt(v, 1)}" for k, v in extra["lb_rss_mb"].items())
    print(f"load balancer RSS (MB) after the runs: {lb_rss}")
    print(ray_note)
    print()
    print_side_by_side(rows, extra, args)
    print()
    print_targets(rows, extra)
    sse = extra.get("sse")
    if sse:
        print()
        print(
            f"SSE through the load balancer ({extra['sse_kind']} replica, 1 replica): "
            f"{sse['direct']['streams']} streams of {args.sse_events} events "
            f"{args.sse_interval * 1000:g} ms apart, each on a new connection; "
            f"burst: {args.sse_burst} events written at once"
        )
        sse_rows = []
        for name in ("direct", "steady"):
            s = sse[name]
            sse_rows.append(
                [
                    "direct" if name == "direct" else "SteadyServe LB",
                    f"{s['ttfb_p50']:.3f}",
                    f"{s['ttfb_p99']:.3f}",
                    f"{s['delay_p50']:.3f}",
                    f"{s['delay_p99']:.3f}",
                    f"{s['burst_events_per_s']:.0f}",
                ]
            )
        d, s = sse["direct"], sse["steady"]
        sse_rows.append(
            [
                "LB adds",
                f"{s['ttfb_p50'] - d['ttfb_p50']:+.3f}",
                f"{s['ttfb_p99'] - d['ttfb_p99']:+.3f}",
                f"{s['delay_p50'] - d['delay_p50']:+.3f}",
                f"{s['delay_p99'] - d['delay_p99']:+.3f}",
                "",
            ]
        )
        print(
            table(
                [
                    "target",
                    "TTFB p50 ms",
                    "TTFB p99 ms",
                    "per-event p50 ms",
                    "per-event p99 ms",
                    "burst events/s",
                ],
                sse_rows,
            )
        )


TARGET_NAMES = {
    "direct": "direct",
    "steady": "SteadyServe LB",
    "steady-net": "SteadyServe LB, isolated replicas",
    "ray": "Ray Serve proxy",
}


def target_name(target: str, extra: dict[str, Any]) -> str:
    """How a target is named in the tables; nginx and HAProxy with their versions."""
    if target in PROXIES:
        return str(extra["proxy_labels"].get(target, PROXIES[target].name))
    return TARGET_NAMES[target]


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b and not math.isnan(a) and not math.isnan(b) else "-"


def print_side_by_side(rows: list[Row], extra: dict[str, Any], args: argparse.Namespace) -> None:
    """Per replica kind, each proxy in front of the same single replica (Ray: its own
    deployment): p50 at 1 connection, req/s and the proxy's CPU per request at each
    connection count, then SteadyServe's LB relative to nginx and to HAProxy."""
    conns = [int(x) for x in args.connections.split(",")]
    by = {(r.kind, r.target, r.replicas, r.connections): r.result for r in rows}
    headers = [
        "proxy",
        "c1 p50 ms",
        "+p50 ms",
        *(f"c{c} req/s" for c in conns),
        *(f"c{c} CPU us/req" for c in conns),
    ]
    kinds = list(dict.fromkeys(r.kind for r in rows if r.kind != "ray"))
    for i, kind in enumerate(kinds):
        results: dict[str, dict[int, WrkResult]] = {}
        names = ["direct", *args.proxies, "steady"] + (["ray"] if i == 0 else [])
        out: list[list[str]] = []
        for target in names:
            source = "ray" if target == "ray" else kind
            got = {c: by[(source, target, 1, c)] for c in conns if (source, target, 1, c) in by}
            note = extra["proxy_notes"].get((kind, target))
            if note:
                out.append([target_name(target, extra), note])
                continue
            if not got:
                continue
            results[target] = got
            out.append(side_by_side_cells(target_name(target, extra), got, results, conns))
        steady = results.get("steady", {})
        for key in args.proxies:
            other = results.get(key)
            if not steady or not other:
                continue
            cells = [f"SteadyServe / {PROXIES[key].name}"]
            cells.append(ratio(steady[1].p50_ms, other[1].p50_ms) if 1 in steady else "-")
            cells.append("")
            cells += [ratio(steady[c].rps, other[c].rps) if c in steady else "-" for c in conns]
            cells += [
                ratio(steady[c].proxy_us, other[c].proxy_us) if c in steady else "-" for c in conns
            ]
            out.append(cells)
        print(
            f"proxies side by side, {kind} hello replica (1 replica behind each proxy"
            + ("; Ray Serve: its own deployment" if "ray" in results else "")
            + "):"
        )
        print(table(headers, out))
    print(
        "CPU us/req: CPU time (user+system) of the proxy's processes during the run per request. "
        "SteadyServe / X: req/s, p50 and CPU of SteadyServe's LB divided by X's "
        "(req/s above 1x: faster; p50 and CPU below 1x: cheaper)."
    )


def side_by_side_cells(
    name: str,
    got: dict[int, WrkResult],
    results: dict[str, dict[int, WrkResult]],
    conns: list[int],
) -> list[str]:
    direct = results.get("direct", {})
    c1 = got.get(1)
    added = "-"
    if c1 and 1 in direct and got is not direct:
        added = f"{c1.p50_ms - direct[1].p50_ms:+.3f}"
    elif got is direct:
        added = ""
    return [
        name,
        f"{c1.p50_ms:.3f}" if c1 else "-",
        added,
        *(f"{got[c].rps:.0f}" if c in got else "-" for c in conns),
        *(fmt(got[c].proxy_us, 1) if c in got else "-" for c in conns),
    ]


def verdict(ok: bool) -> str:
    return "holds" if ok else "MISSED"


def print_targets(rows: list[Row], extra: dict[str, Any]) -> None:
    """The performance targets of docs/design.md, per replica kind (1 replica behind the LB)."""
    by = {(r.kind, r.target, r.replicas, r.connections): r.result for r in rows}
    ray16 = by.get(("ray", "ray", 1, 16))
    out = []
    for kind in dict.fromkeys(r.kind for r in rows if r.kind != "ray"):
        d1, lb1 = by.get((kind, "direct", 1, 1)), by.get((kind, "steady", 1, 1))
        d16, lb16 = by.get((kind, "direct", 1, 16)), by.get((kind, "steady", 1, 16))
        cells = [f"{kind} hello"]
        if d16 and lb16 and d16.rps:
            share = lb16.rps / d16.rps * 100
            cells.append(f"{share:.0f}% ({verdict(share >= 50)})")
        else:
            cells.append("-")
        if d1 and lb1:
            added = lb1.p50_ms - d1.p50_ms
            cells.append(f"{added:+.3f} ms ({verdict(added <= 0.3)})")
        else:
            cells.append("-")
        if lb16 and ray16 and ray16.rps:
            ratio = lb16.rps / ray16.rps
            cells.append(f"{ratio:.0f}x ({verdict(ratio >= 20)})")
        else:
            cells.append("- (no Ray)")
        out.append(cells)
    print("targets (docs/design.md), 1 replica behind the LB:")
    print(
        table(
            ["replica", "LB/direct c=16 >= 50%", "added p50 c=1 <= 0.3 ms", "vs Ray c=16 >= 20x"],
            out,
        )
    )
    sizes = [v for v in extra["lb_rss_mb"].values() if v is not None]
    if sizes:
        print(
            f"load balancer RSS <= 60 MB: largest {max(sizes):.1f} MB ({verdict(max(sizes) <= 60)})"
        )


def plot(rows: list[Row], args: argparse.Namespace) -> None:
    plt = pyplot()
    if plt is None:
        return
    conns = sorted({r.connections for r in rows})
    series: dict[str, dict[int, WrkResult]] = {}
    for r in rows:
        if r.target == "direct":
            label = f"direct ({r.kind})"
        elif r.target == "steady":
            label = f"SteadyServe x{r.replicas} ({r.kind})"
        elif r.target in PROXIES:
            label = f"{PROXIES[r.target].name} ({r.kind})"
        else:
            label = f"Ray Serve x{r.replicas}"
        series.setdefault(label, {})[r.connections] = r.result
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.8))
    width = 0.8 / max(1, len(series))
    colors = plt.get_cmap("tab20").colors
    for i, (label, by_c) in enumerate(series.items()):
        xs = [j + i * width for j in range(len(conns))]
        color = colors[i % len(colors)]
        rps = [by_c[c].rps if c in by_c else 0 for c in conns]
        p50 = [by_c[c].p50_ms if c in by_c else 0 for c in conns]
        axes[0].bar(xs, rps, width, label=label, color=color)
        axes[1].bar(xs, p50, width, color=color)
    for ax, title in zip(axes, ("requests/s (log)", "p50 latency, ms (log)"), strict=True):
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(conns))])
        ax.set_xticklabels([f"{c} conn" for c in conns])
        ax.set_yscale("log")
        ax.set_title(title)
    fig.legend(loc="lower center", ncol=4, fontsize=8)
    fig.suptitle("Load-balancer overhead: wrk, trivial replica")
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    path = plot_path("lb_overhead.png")
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run (whole)")
    p.add_argument("--connections", default="1,16,64")
    p.add_argument("--replicas", default="1,2", help="SteadyServe/Ray replica counts")
    p.add_argument(
        "--kinds",
        default="uvloop,asyncio,aiohttp",
        help=f"hello replica kinds, of {','.join(KIND_ARGS)}",
    )
    p.add_argument("--threads", type=int, default=1, help="wrk threads")
    p.add_argument("--rounds", type=int, default=1, help="runs per target; the median is shown")
    p.add_argument("--no-sse", dest="sse", action="store_false", help="skip the SSE table")
    p.add_argument("--sse-events", type=int, default=20)
    p.add_argument("--sse-interval", type=float, default=0.005, help="seconds between events")
    p.add_argument("--sse-burst", type=int, default=2000, help="events of the burst stream")
    p.add_argument("--no-ray", dest="ray", action="store_false", help="skip Ray Serve")
    p.add_argument(
        "--no-isolation",
        dest="isolation",
        action="store_false",
        help="skip the SteadyServe rows whose replicas have their own network namespace"
        " (run only where the machine gives namespaces: root, slirp4netns)",
    )
    p.add_argument(
        "--proxies",
        default="nginx,haproxy",
        help="C proxies to run in front of each kind's replica, of nginx,haproxy; or none; "
        "floor adds bench/byte_relay.py, the floor of any proxy running Python per request; "
        "floor-c the same relay with data_received in C (bench/native_floor.c; needs cc)",
    )
    args = p.parse_args()
    if args.isolation and netns.unavailable() is not None:
        print(f"isolated rows skipped: {netns.unavailable()}", file=sys.stderr)
        args.isolation = False
    args.proxies = [] if args.proxies == "none" else args.proxies.split(",")
    unknown = [x for x in args.proxies if x not in PROXIES]
    if unknown:
        known = ", ".join(PROXIES)
        p.error(f"--proxies: unknown proxy {unknown[0]!r} (of {known}, or none)")
    if not have_wrk():
        print("wrk not found on PATH (apt-get install wrk)", file=sys.stderr)
        return 1
    with steady_home("steady-bench-lb-") as home:
        rows, extra = measure_steady(args, home)
    ray_note = "Ray Serve skipped: --no-ray"
    if args.ray:
        ray_rows, ray_note = measure_ray(args)
        rows += ray_rows
    report(rows, extra, ray_note, args)
    plot(rows, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
