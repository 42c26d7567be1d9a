"""The floor of any proxy whose per-request path runs Python on uvloop.

Not a load balancer: each client connection gets its own connection to one
upstream, opened once, and bytes are copied both ways as they arrive. No HTTP
parsing, no routing, no pooling, no counters: per request exactly the two
``data_received`` callbacks and two ``transport.write`` calls that any design
keeping Python in the loop must make (a C helper called from Python included).

``bench/lb_overhead.py --proxies nginx,haproxy,floor`` runs it beside nginx and
HAProxy: if even this cannot match nginx on the machine, no small native helper
under a Python event loop can, and matching needs the whole per-request path
(its event loop included) out of the interpreter.

    python bench/byte_relay.py --port 8081 --upstream 8080
    python bench/byte_relay.py --args FILE   # FILE holds "PORT UPSTREAM" (benchlib)
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from pathlib import Path

import uvloop


def native_side() -> type:
    """``native_floor.Side`` (bench/native_floor.c), compiled on first use into
    bench/out/ with this interpreter's compiler settings; raises OSError (with
    the compiler's last line) when there is no C compiler."""
    import importlib.util
    import os
    import subprocess
    import sysconfig

    source = Path(__file__).with_name("native_floor.c")
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    built = Path(__file__).with_name("out") / f"native_floor{suffix}"
    if not built.exists() or built.stat().st_mtime < source.stat().st_mtime:
        built.parent.mkdir(exist_ok=True)
        compiler = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
        include = sysconfig.get_paths()["include"]
        argv = [*compiler, "-O2", "-shared", "-fPIC", f"-I{include}", str(source), "-o", str(built)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise OSError(f"cannot compile {source.name}: {exc}") from None
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines() or ["failed"]
            errors = [line for line in lines if "error" in line] or lines
            raise OSError(f"cannot compile {source.name}: {errors[0].strip()}")
    spec = importlib.util.spec_from_file_location("native_floor", built)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Side  # type: ignore[no-any-return]


class Relay(asyncio.Protocol):
    """Connection setup and teardown of one end of a pair, the same for both
    relays; a client end opens its own upstream connection when it arrives."""

    upstream_port = 0
    upstream: type[Relay]  # the class of the upstream end (client ends only)
    accepting = False  # a client end
    transport: asyncio.Transport | None = None
    peer: Relay | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.accepting:
            asyncio.get_running_loop().create_task(self._connect())

    def connection_lost(self, exc: Exception | None) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.close()

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, up = await loop.create_connection(self.upstream, "127.0.0.1", self.upstream_port)
        except OSError:
            if self.transport is not None:
                self.transport.close()
            return
        up.peer, self.peer = self, up
        self.joined(up)

    def joined(self, up: Relay) -> None:
        """Both ends are connected: relay from now on, the bytes kept first."""
        raise NotImplementedError


class PythonEnd(Relay):
    """``data_received`` in Python: write what is read to the peer."""

    def __init__(self) -> None:
        self.pending: list[bytes] = []  # bytes read before the peer was connected

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
        else:
            self.pending.append(data)

    def joined(self, up: Relay) -> None:
        if up.transport is not None:
            up.transport.writelines(self.pending)
        self.pending = []


class PythonClient(PythonEnd):
    accepting = True
    upstream = PythonEnd


def native_client() -> type[Relay]:
    """The client end with ``data_received`` in C (native_floor.Side)."""

    class NativeEnd(native_side(), Relay):  # type: ignore[misc]
        def joined(self, up: Relay) -> None:
            assert self.transport is not None and up.transport is not None
            up.set_peer_write(self.transport.write)  # type: ignore[attr-defined]
            up.transport.writelines(self.set_peer_write(up.transport.write))

    class NativeClient(NativeEnd):
        accepting = True
        upstream = NativeEnd

    return NativeClient


async def serve(port: int, upstream: int, native: bool = False) -> None:
    Relay.upstream_port = upstream
    loop = asyncio.get_running_loop()
    factory = native_client() if native else PythonClient
    server = await loop.create_server(factory, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--port", type=int, help="listen on 127.0.0.1:PORT")
    p.add_argument("--upstream", type=int, help="relay to 127.0.0.1:UPSTREAM")
    p.add_argument("--args", type=Path, help='a file holding "PORT UPSTREAM [native]"')
    p.add_argument("--native", action="store_true", help="data_received in C (native_floor.c)")
    args = p.parse_args()
    if args.args is not None:
        words = args.args.read_text().split()
        args.port, args.upstream = int(words[0]), int(words[1])
        args.native = args.native or "native" in words[2:]
    if args.port is None or args.upstream is None:
        p.error("give --port and --upstream, or --args")
    if args.native:
        try:
            native_side()
        except OSError as exc:
            sys.exit(f"byte_relay: {exc}")
    uvloop.run(serve(args.port, args.upstream, args.native))


if __name__ == "__main__":
    main()
