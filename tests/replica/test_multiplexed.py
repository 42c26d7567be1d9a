"""A multiplexed deployment in a real runner: it reports the models it holds on
``/-/info`` (what the controller puts in the route table) and, stopping, unloads
every model and calls the instance's ``__del__``, as Ray's replica does."""

from __future__ import annotations

import http.client
import os
import signal
import textwrap
from pathlib import Path

from tests.replica._proc import HOST, Replica

SOURCE = """
    import os
    import pathlib

    from steadyserve import serve

    LOG = pathlib.Path(os.environ["TEST_LOG"])

    def note(line):
        with LOG.open("a") as out:
            out.write(line + "\\n")

    class Loaded:
        def __init__(self, name):
            self.name = name

        def __del__(self):
            note(f"unloaded {self.name}")

    class Host:
        @serve.multiplexed(max_num_models_per_replica=2)
        async def get_model(self, model_id):
            return Loaded(model_id)

        async def __call__(self):
            model = await self.get_model(serve.get_multiplexed_model_id())
            return model.name

        def __del__(self):
            note("instance deleted")
"""

PLAIN = """
    class Plain:
        def __call__(self):
            return "plain"
"""


def _get(port: int, model_id: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        conn.request("GET", "/", headers={"serve_multiplexed_model_id": model_id})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _start(tmp_path: Path, module: str, source: str, attr: str) -> tuple[Replica, Path]:
    wd = tmp_path / module
    wd.mkdir()
    (wd / f"{module}.py").write_text(textwrap.dedent(source))
    log = tmp_path / "log.txt"
    log.touch()
    return Replica(wd, f"{module}:{attr}", {"TEST_LOG": str(log)}), log


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines()


def test_a_replica_lists_its_models_and_unloads_them_when_it_stops(tmp_path: Path) -> None:
    replica, log = _start(tmp_path, "mux", SOURCE, "Host")
    with replica:
        replica.wait_health(200)
        # Before any load it says it is multiplexed: an empty list, not no field.
        assert replica.control("GET", "/-/info")[1]["multiplexed_model_ids"] == []
        for model_id in ("a", "b", "c"):
            assert _get(replica.port, model_id) == (200, model_id.encode())
        # The LRU holds two: "a" went, its __del__ called at eviction (once: the
        # garbage collector does not call it again).
        assert replica.control("GET", "/-/info")[1]["multiplexed_model_ids"] == ["b", "c"]
        assert _lines(log) == ["unloaded a"]

        os.kill(replica.proc.pid, signal.SIGTERM)
        assert replica.wait_exit() == 0
    # Each __del__ once, models first (their cleanup may still use the instance).
    assert _lines(log) == ["unloaded a", "unloaded b", "unloaded c", "instance deleted"]


def test_a_replica_without_multiplexing_lists_no_models(tmp_path: Path) -> None:
    replica, _ = _start(tmp_path, "plain", PLAIN, "Plain")
    with replica:
        replica.wait_health(200)
        assert "multiplexed_model_ids" not in replica.control("GET", "/-/info")[1]
