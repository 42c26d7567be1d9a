"""Model-aware routing at the gateway: the OpenAI ``model`` field picks the service."""

from __future__ import annotations

import asyncio
from typing import Any

from steadyserve.controller.gateway import model_map
from steadyserve.lb.balancer import Balancer
from steadyserve.lb.gateway import GatewayProxy, request_model
from steadyserve.lb.proxy import Exchange, Proxy
from steadyserve.spec import ServiceSpec


class Lane(Proxy):
    """A service's lane that records what it was handed instead of routing it."""

    def __init__(self, name: str) -> None:
        super().__init__(name, Balancer(None))
        self.got: list[Exchange] = []

    def dispatch(self, ex: Exchange) -> None:
        self.got.append(ex)


class Client:
    """The little of a client connection that an exchange needs here."""


def exchange(path: str, body: bytes | None) -> Exchange:
    ex = Exchange(Client())  # type: ignore[arg-type]
    ex.head = f"POST {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode()
    ex.pending = None if body is None else [body[:10], body[10:]]
    return ex


def in_loop(test: Any) -> Any:
    """Proxies bind the running loop when built."""

    def run() -> None:
        async def body() -> None:
            test()

        asyncio.run(body())

    run.__name__ = test.__name__
    return run


@in_loop
def test_the_model_picks_the_service_and_anything_else_goes_by_prefix() -> None:
    gateway = GatewayProxy()
    llama, qwen, root = Lane("llama"), Lane("qwen"), Lane("root")
    gateway.set_lanes({b"/": root}, {b"llama-3-8b": llama, b"qwen2": qwen})
    gateway.dispatch(exchange("/v1/chat/completions", b'{"model": "qwen2", "messages": []}'))
    gateway.dispatch(exchange("/v1/completions", b'{"prompt": "x", "model":"llama-3-8b"}'))
    gateway.dispatch(exchange("/v1/chat/completions", b'{"model": "gpt-9", "messages": []}'))
    gateway.dispatch(exchange("/health", None))
    assert [len(lane.got) for lane in (llama, qwen, root)] == [1, 1, 2]


@in_loop
def test_without_a_model_map_an_unknown_path_is_still_404() -> None:
    gateway = GatewayProxy()
    seen: list[tuple[int, str]] = []
    gateway._respond = lambda ex, status, text, reason: seen.append((status, text))  # type: ignore[method-assign]
    gateway.set_lanes({b"/api": Lane("api")})
    gateway.dispatch(exchange("/v1/chat/completions", b'{"model": "qwen2"}'))
    assert seen and seen[0][0] == 404


def test_the_model_field_is_read_tolerantly() -> None:
    assert request_model([b'{"model": "a\\"b", "x": 1}']) == b'a\\"b'
    assert request_model([b'{"messages": [{"content": "the \\"model\\": \\"x\\""}]}']) is None
    assert request_model([b"not json"]) is None
    assert request_model(None) is None


def spec(name: str, models: list[str]) -> ServiceSpec:
    data: dict[str, Any] = {"name": name, "run": "x", "service": {"served_model_names": models}}
    return ServiceSpec.model_validate(data)


def test_the_model_map_names_each_model_once_whatever_the_order() -> None:
    specs = [spec("b-svc", ["shared", "b"]), spec("a-svc", ["shared", "a"]), spec("c", [])]
    assert model_map(specs) == {"a": "a-svc", "b": "b-svc", "shared": "a-svc"}
    assert model_map(reversed(specs)) == model_map(specs)
