"""``service.isolation``: how it resolves, what preflight refuses, the route field
that carries a namespace, and (as root) the namespace plumbing itself: sockets
made inside while the caller stays outside, listening ports seen through the
replica's own /proc tables, and reaping what no replica claims."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from steadyserve.backends import netns
from steadyserve.compat.skypilot import fixed_port_problem, isolation_problem
from steadyserve.controller.capacity import request_for
from steadyserve.controller.fixed_ports import listening_ports
from steadyserve.spec import SpecError, parse_service
from steadyserve.spec.ports import isolated
from steadyserve.wire.netns import socket_in
from steadyserve.wire.routes import ReplicaRoute

FIXED = {"run": "python3 server.py --port 8080", "resources": {"ports": 8080}}
USES_PORT = {"run": "python3 server.py --port $PORT"}
NO_NETNS = "making network namespaces needs root here (the controller runs as a user)"


def parse(data: dict[str, Any], tmp: Path) -> Any:
    return parse_service(data, base_dir=tmp)


@pytest.mark.parametrize(
    ("base", "mode", "expected"),
    [
        (FIXED, None, True),  # auto: a fixed port is isolated
        (USES_PORT, None, False),  # auto: today's services are unchanged
        (FIXED, "none", False),
        (USES_PORT, "network", True),
        ({"import_path": "app:app"}, "network", True),  # Python replicas too
        ({"import_path": "app:app"}, None, False),
    ],
)
def test_isolation_resolves(
    tmp_path: Path, base: dict[str, Any], mode: str | None, expected: bool
) -> None:
    service: dict[str, Any] = {"replicas": 2}
    if mode is not None:
        service["isolation"] = mode
    assert isolated(parse({**base, "service": service}, tmp_path)) is expected


def test_a_bad_isolation_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        parse({**USES_PORT, "service": {"isolation": "pod"}}, tmp_path)
    assert "service.isolation" in str(info.value) and "\n" not in str(info.value)


def test_fixed_ports_beyond_one_replica_need_isolation(tmp_path: Path) -> None:
    two = parse({**FIXED, "service": {"replicas": 2}}, tmp_path)
    assert fixed_port_problem(two, no_isolation=None) is None
    problem = fixed_port_problem(two, no_isolation=NO_NETNS) or ""
    assert problem.startswith("resources.ports: run does not use $PORT")
    assert f"no isolation: {NO_NETNS}" in problem
    off = parse({**FIXED, "service": {"replicas": 2, "isolation": "none"}}, tmp_path)
    assert "service.isolation is none" in (fixed_port_problem(off, no_isolation=None) or "")
    one = parse({**FIXED, "service": {"replicas": 1}}, tmp_path)
    assert fixed_port_problem(one, no_isolation=NO_NETNS) is None  # its port, on the host


def test_network_asked_for_where_there_is_none_is_one_line(tmp_path: Path) -> None:
    asked = parse({**USES_PORT, "service": {"isolation": "network"}}, tmp_path)
    assert isolation_problem(asked, "local", None) is None
    assert isolation_problem(asked, "local", NO_NETNS) == (
        f"service.isolation: network is not available here: {NO_NETNS}"
    )
    assert "local backend" in (isolation_problem(asked, "ray", None) or "")
    python = parse({"import_path": "app:app", "service": {"isolation": "network"}}, tmp_path)
    assert isolation_problem(python, "local", None) is None  # Python replicas are isolated too
    assert "local backend" in (isolation_problem(python, "ray", None) or "")


def test_a_route_carries_its_namespace() -> None:
    route = ReplicaRoute(id=1, version=2, host="127.0.0.1", port=8080, netns="/run/netns/ssv-x")
    assert ReplicaRoute.from_json(route.to_json(), "replicas[0].") == route
    plain = ReplicaRoute(id=1, version=2, host="127.0.0.1", port=8080)
    assert "netns" not in plain.to_json()  # a table without isolation reads as before
    with pytest.raises(ValueError, match=r"replicas\[0\]\.netns"):
        ReplicaRoute.from_json({**route.to_json(), "netns": "ssv-x"}, "replicas[0].")


def test_names_are_per_home_service_and_replica() -> None:
    a = netns.name_for("/home/a", "web", 1)
    assert a.startswith(netns.home_prefix("/home/a")) and a.endswith("-1")
    assert len({a, netns.name_for("/home/b", "web", 1), netns.name_for("/home/a", "api", 1)}) == 3


needs_root = pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable()))


@pytest.fixture
def space(tmp_path: Path) -> Iterator[str]:
    name = netns.name_for(tmp_path, "unit", 1)
    netns.create(name, tmp_path / "slirp.log")
    try:
        yield name
    finally:
        netns.remove(name)
        assert not netns.exists(name) and not netns.helpers(name)


def listener_in(name: str, port: int) -> subprocess.Popen[bytes]:
    code = (
        "import socket,sys,time;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,"
        f"socket.SO_REUSEADDR,1);s.bind(('127.0.0.1',{port}));s.listen();print('up',flush=True);"
        "c,_=s.accept();c.sendall(b'inside');time.sleep(30)"
    )
    proc = subprocess.Popen(
        netns.exec_command(name, [sys.executable, "-c", code]), stdout=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    return proc


@needs_root
def test_a_socket_made_inside_reaches_the_replica_and_the_caller_stays_out(space: str) -> None:
    with socket.socket() as outside:  # the same port, free on the host's loopback
        outside.bind(("127.0.0.1", 0))
        port = outside.getsockname()[1]
    proc = listener_in(space, port)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as probe_host:
            pytest.fail(f"the host's loopback should have nothing on {port}: {probe_host}")
    except ConnectionRefusedError:
        pass
    try:
        sock = socket_in(netns.path_of(space))
        sock.settimeout(5)
        with sock:
            sock.connect(("127.0.0.1", port))
            assert sock.recv(16) == b"inside"
    finally:
        proc.kill()
        proc.wait()


@needs_root
def test_listening_ports_are_read_in_the_replica_namespace(space: str) -> None:
    proc = listener_in(space, 8080)
    try:
        deadline = time.monotonic() + 5
        while 8080 not in listening_ports(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert 8080 in listening_ports(proc.pid)
    finally:
        proc.kill()
        proc.wait()


@needs_root
def test_reap_removes_only_unclaimed_namespaces_of_the_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    kept, lost = netns.name_for(home, "web", 1), netns.name_for(home, "web", 2)
    other = netns.name_for(tmp_path / "other", "web", 1)
    for name in (kept, lost, other):
        netns.create(name, tmp_path / f"{name}.log")
    try:
        assert netns.reap(home, {kept}) == [lost]
        assert netns.of_home(home) == [kept] and netns.of_home(tmp_path / "other") == [other]
        assert not netns.helpers(lost) and len(netns.helpers(kept)) == 1
    finally:
        for name in (kept, lost, other):
            netns.remove(name)
    assert netns.of_home(home) == [] and netns.of_home(tmp_path / "other") == []


@needs_root
def test_an_unprivileged_user_gets_no_isolation_and_one_line_says_why(tmp_path: Path) -> None:
    """Dropped to ``nobody`` in a forked child (this machine's Python lives under
    /root, mode 0700, so no new interpreter could start as another user): it can
    make no namespace, the reason says so, and preflight refuses two fixed-port
    replicas with that reason while one still runs on the host."""
    spec_two = parse({**FIXED, "service": {"replicas": 2}}, tmp_path)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            reason = netns.unavailable.__wrapped__()
            made = subprocess.run(
                ["ip", "netns", "add", netns.name_for(tmp_path, "nonroot", 1)],
                capture_output=True,
                timeout=10,
            ).returncode
            problem = fixed_port_problem(spec_two, no_isolation=reason)
            os.write(write_end, json.dumps([reason, made, problem]).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as answer:
        reason, made, problem = json.loads(answer.read() or "[null, 0, null]")
    os.waitpid(pid, 0)
    assert reason == NO_NETNS
    assert made != 0 and not netns.of_home(tmp_path)
    assert problem is not None and f"no isolation: {NO_NETNS}" in problem and "\n" not in problem
    one = parse({**FIXED, "service": {"replicas": 1}}, tmp_path)
    assert fixed_port_problem(one, no_isolation=reason) is None


@pytest.mark.skipif(netns.unavailable() is not None, reason="no network namespaces here")
def test_an_isolated_fixed_port_is_no_capacity_to_share(tmp_path: Path) -> None:
    """Replicas in namespaces of their own may all bind 8080: the capacity pool
    holds the port only for replicas on the host's network (docs/gpus.md, fixed ports)."""
    isolated_spec = parse({**FIXED, "service": {"replicas": 2}}, tmp_path)
    on_host = parse({**FIXED, "service": {"replicas": 1, "isolation": "none"}}, tmp_path)
    assert request_for(isolated_spec, isolates=True).ports == ()
    assert request_for(on_host).ports == (8080,)


@needs_root
def test_namespaces_of_a_deleted_home_are_reaped_and_no_live_or_unknown_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A controller starting in one home removes the namespaces of homes that no
    longer exist; another home that exists, or one never recorded, keeps its own."""
    monkeypatch.setattr(netns, "HOMES_DIR", tmp_path / "records")
    own, live, deleted, unknown = (tmp_path / n for n in ("own", "live", "deleted", "unknown"))
    names = [netns.name_for(home, "web", 1) for home in (own, live, deleted, unknown)]
    for home in (own, live, deleted):
        home.mkdir()
        netns.record_home(home)
    unknown.mkdir()
    for name in names:
        netns.create(name, tmp_path / f"{name}.log")
    try:
        deleted.rmdir()
        unknown.rmdir()  # deleted too, but no record says whose its namespaces are
        assert netns.reap_deleted_homes(own) == [names[2]]
        assert not netns.exists(names[2]) and not netns.helpers(names[2])
        assert all(netns.exists(name) for name in (names[0], names[1], names[3]))
        assert netns.reap_deleted_homes(own) == []
    finally:
        for name in names:
            netns.remove(name)
