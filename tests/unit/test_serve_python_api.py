"""The replica-side pieces of Ray Serve's Python API, in process: @serve.batch,
@serve.multiplexed, the multiplex routing policy, function deployments, the
shipped application's Python check and serve.status()'s shape."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from steadyserve import serve
from steadyserve.core.routing.multiplex import ModelAffinity
from steadyserve.replica.graph import function_class
from steadyserve.serve import context, shipped
from steadyserve.serve.errors import LoadError
from steadyserve.serve.overview import serve_status


def test_batch_gathers_concurrent_calls_into_one_list() -> None:
    seen: list[list[int]] = []

    class Doubler:
        @serve.batch(max_batch_size=4, batch_wait_timeout_s=10)
        async def double(self, xs: list[int]) -> list[int]:
            seen.append(xs)
            return [x * 2 for x in xs]

    async def main() -> list[int]:
        d = Doubler()
        return list(await asyncio.gather(*(d.double(i) for i in range(8))))

    assert asyncio.run(main()) == [0, 2, 4, 6, 8, 10, 12, 14]
    assert seen == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_batch_runs_a_partial_batch_after_the_timeout() -> None:
    @serve.batch(max_batch_size=100, batch_wait_timeout_s=0.05)
    async def ident(xs: list[str]) -> list[str]:
        return xs

    assert asyncio.run(ident("a")) == "a"


def test_batch_generator_streams_each_caller_its_items() -> None:
    @serve.batch(max_batch_size=2, batch_wait_timeout_s=10)
    async def count(prefixes: list[str]) -> Any:
        for i in range(3):
            yield [f"{p}{i}" for p in prefixes]

    async def collect(p: str) -> list[str]:
        return [item async for item in count(p)]

    async def main() -> list[list[str]]:
        return list(await asyncio.gather(collect("a"), collect("b")))

    assert asyncio.run(main()) == [["a0", "a1", "a2"], ["b0", "b1", "b2"]]


def test_batch_refuses_bad_options_and_sync_functions() -> None:
    with pytest.raises(ValueError):
        serve.batch(max_batch_size=0)
    with pytest.raises(TypeError):
        serve.batch(max_batch_size=1.5)
    with pytest.raises(ValueError):
        serve.batch(batch_wait_timeout_s=-1)
    with pytest.raises(TypeError, match="async def"):
        serve.batch(lambda xs: xs)


def test_a_batch_that_loses_items_fails_every_caller() -> None:
    @serve.batch(max_batch_size=2, batch_wait_timeout_s=10)
    async def lossy(xs: list[int]) -> list[int]:
        return xs[:1]

    async def main() -> list[Any]:
        return list(await asyncio.gather(lossy(1), lossy(2), return_exceptions=True))

    assert all(isinstance(r, serve.RayServeException) for r in asyncio.run(main()))


def test_multiplexed_keeps_the_most_recent_models_and_deletes_the_evicted() -> None:
    deleted: list[str] = []
    loads: list[str] = []

    class Model:
        def __init__(self, name: str) -> None:
            self.name = name

        def __del__(self) -> None:
            deleted.append(self.name)

    class Host:
        @serve.multiplexed(max_num_models_per_replica=2)
        async def get_model(self, model_id: str) -> Model:
            loads.append(model_id)
            return Model(model_id)

    async def main() -> None:
        host = Host()
        for model_id in ["a", "b", "a", "c", "a"]:
            assert (await host.get_model(model_id)).name == model_id

    # As in Ray, the LRU lives in a replica only: it needs the replica's context.
    ids = context.ReplicaID("1", context.DeploymentID("Host"))
    context.set_replica_context(context.ReplicaContext(ids))
    try:
        asyncio.run(main())
    finally:
        context.set_replica_context(None)
    assert loads == ["a", "b", "c"]  # "a" stayed loaded: it was used most recently
    assert deleted[:1] == ["b"]


def test_multiplexed_refuses_a_bad_limit() -> None:
    with pytest.raises(ValueError):
        serve.multiplexed(max_num_models_per_replica=0)
    with pytest.raises(TypeError):
        serve.multiplexed(max_num_models_per_replica="3")  # type: ignore[arg-type]


@dataclass
class _C:
    id: int
    inflight: int = 0
    version: int = 1
    capacity: float = 1.0
    accelerator: str | None = None


def test_multiplex_policy_goes_where_the_model_is_unless_that_replica_is_full() -> None:
    policy = ModelAffinity(models_per_replica=2)
    replicas = [_C(1), _C(2), _C(3)]
    first = policy.choose(replicas, 10, key="m1")
    assert first is not None
    # The same model goes back to the same replica, however loaded it is.
    first.inflight = 5
    assert policy.choose(replicas, 10, key="m1") is first
    # Full: the least loaded replica takes it (and now holds it too).
    first.inflight = 10
    other = policy.choose(replicas, 10, key="m1")
    assert other is not None and other is not first
    assert sorted(policy.holders("m1")) == sorted([first.id, other.id])
    # No key: the fallback (least load) decides.
    assert policy.choose(replicas, 10) is not None


def test_multiplex_policy_forgets_evicted_models_and_gone_replicas() -> None:
    policy = ModelAffinity(models_per_replica=1)
    only = [_C(1)]
    policy.choose(only, 0, key="a")
    policy.choose(only, 0, key="b")  # replica 1 holds one model: "a" is evicted
    assert policy.holders("a") == [] and policy.holders("b") == [1]
    policy.forget(1)  # replica 1 left the table
    policy.choose([_C(2)], 0, key="b")
    assert policy.holders("b") == [2]


def test_function_deployments_are_hosted_as_classes() -> None:
    def plain(x: int) -> int:
        return x + 1

    async def coro(x: int) -> int:
        return x + 2

    assert function_class(plain)()(1) == 2
    assert asyncio.run(function_class(coro)()(1)) == 3

    @serve.deployment
    def f(request: Any) -> str:
        return "ok"

    assert f.name == "f" and f("r") == "ok"


def test_a_pickle_from_another_python_is_refused_in_one_line(tmp_path: Path) -> None:
    shipped.write({"x": 1}, tmp_path, {})
    assert shipped.load(tmp_path) == {"x": 1}
    with pytest.raises(LoadError, match=r"pickled by Python 2\.7 but this replica runs"):
        shipped.check_python({"python": "2.7"})


def test_status_groups_services_by_application() -> None:
    services = [
        {
            "name": "app1-model",
            "application": "app1",
            "deployment": "Model",
            "status": "READY",
            "uptime_s": 1,
            "replicas": [{"status": "READY"}, {"status": "STARTING"}],
        },
        {"name": "plain", "application": None, "status": "READY", "replicas": []},
    ]
    status = serve_status(services, 8000)
    assert list(status.applications) == ["app1"]
    app = status.applications["app1"]
    assert app.status == "RUNNING"
    assert app.deployments["Model"].replica_states == {"RUNNING": 1, "STARTING": 1}
