"""On OpenAI API paths (``/v1/...``) the load balancer's and the gateway's own
answers are OpenAI-shaped JSON, with ``Retry-After`` where waiting helps; the
gateway answers an unknown model as vLLM does and lists the served models."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

from _lb_helpers import FakeController, LBProcess, Upstream, request, wait_for

from steadyserve.lb.balancer import Balancer
from steadyserve.lb.downstream import ClientConnection
from steadyserve.lb.gateway import GatewayProxy
from steadyserve.lb.proxy import Exchange, Proxy


def test_a_full_queue_answers_openai_json_with_retry_after(tmp_path: Path) -> None:
    with (
        Upstream("slow") as up,
        LBProcess(
            tmp_path, "--static-routes", up.address, "--max-ongoing", "1", "--max-queued", "0"
        ) as lb,
    ):
        held = threading.Thread(target=request, args=(lb.port, "GET", "/hold"), daemon=True)
        held.start()
        wait_for(lambda: len(up.requests) == 1, what="the one slot taken")
        chat = b'{"model": "m", "messages": []}'
        status, headers, body = request(lb.port, "POST", "/v1/chat/completions", body=chat)
        assert status == 503
        assert headers["content-type"] == "application/json"
        assert headers["retry-after"] == "1"
        error = json.loads(body)["error"]
        assert error == {
            "message": "service 'svc' is at capacity, queue full",
            "type": "server_error",
            "param": None,
            "code": "queue_full",
        }
        # Off the OpenAI paths: the same text as ever, and the Retry-After too.
        status, headers, body = request(lb.port, "GET", "/other")
        assert (status, headers["retry-after"]) == (503, "1")
        assert body == b"service 'svc' is at capacity, queue full\n"
        up.gate.set()
        held.join(15)


def test_no_replica_answers_openai_json_with_a_longer_retry_after(tmp_path: Path) -> None:
    with FakeController(tmp_path) as ctl, LBProcess(tmp_path) as lb:
        wait_for(lambda: len(ctl.polls) >= 2, what="LB polled and acknowledged")
        status, headers, body = request(lb.port, "POST", "/v1/completions", body=b"{}")
        assert (status, headers["retry-after"]) == (503, "5")
        assert json.loads(body)["error"]["code"] == "no_replica"


class Written:
    """A client transport that keeps what the load balancer wrote."""

    def __init__(self) -> None:
        self.data = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.data += data

    def writelines(self, data: list[bytes]) -> None:
        self.data += b"".join(data)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class Lane(Proxy):
    """A service's lane that records what it was handed instead of routing it."""

    def __init__(self, name: str) -> None:
        super().__init__(name, Balancer(None))
        self.got: list[Exchange] = []

    def dispatch(self, ex: Exchange) -> None:
        self.got.append(ex)


def _ask(gateway: GatewayProxy, raw: bytes) -> tuple[int, dict[str, str], Any]:
    """One request through a real client connection of the gateway: its answer."""
    client = ClientConnection(gateway)
    transport = Written()
    client.connection_made(transport)  # type: ignore[arg-type]
    client.data_received(raw)
    head, _, body = transport.data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, json.loads(body)


def _post(path: str, body: bytes) -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (
        path.encode(),
        len(body),
        body,
    )


def test_the_gateway_answers_an_unknown_model_as_vllm_and_lists_the_models() -> None:
    async def scenario() -> None:
        gateway = GatewayProxy()
        llama, qwen = Lane("llama"), Lane("qwen")
        gateway.set_lanes(
            {b"/llama": llama, b"/qwen": qwen}, {b"llama-3-8b": llama, b"qwen2": qwen}
        )
        status, headers, answer = _ask(
            gateway, _post("/v1/chat/completions", b'{"model": "gpt-\\"9", "messages": []}')
        )
        assert (status, headers["content-type"]) == (404, "application/json")
        assert answer == {
            "error": {
                "message": 'The model `gpt-"9` does not exist.',
                "type": "NotFoundError",
                "param": None,
                "code": 404,
            }
        }
        status, _, listed = _ask(gateway, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == 200 and listed["object"] == "list"
        assert [(m["id"], m["object"], m["owned_by"]) for m in listed["data"]] == [
            ("llama-3-8b", "model", "steadyserve"),
            ("qwen2", "model", "steadyserve"),
        ]
        assert all(isinstance(m["created"], int) for m in listed["data"])
        # A known model still reaches its service.
        _ask_raw = ClientConnection(gateway)
        _ask_raw.connection_made(Written())  # type: ignore[arg-type]
        _ask_raw.data_received(_post("/v1/completions", b'{"model": "qwen2", "prompt": "x"}'))
        assert len(qwen.got) == 1 and not llama.got

    asyncio.run(scenario())
