"""What the load balancer reads from a request for a request-aware policy."""

from __future__ import annotations

import json

from steadyserve.core.routing.options import PolicyOptions
from steadyserve.core.routing.prefix import chain
from steadyserve.lb.request_key import extractor, prompt_bytes, read_key

HEAD = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Session-ID: abc\r\n"
    b"Cookie: a=1; sid=s-42; b=2\r\ncontent-length: 10\r\n\r\n"
)
OPTIONS = PolicyOptions(block_bytes=16)


def chat(*contents: str, extra: str = ', "max_tokens": 16') -> bytes:
    messages = [{"role": "user", "content": c} for c in contents]
    return b'{"model": "m", "messages": ' + json.dumps(messages).encode() + extra.encode() + b"}"


def test_a_growing_history_shares_the_chain_of_its_earlier_turns() -> None:
    read = extractor("prompt", OPTIONS)
    one = read(HEAD, chat("S" * 200))
    two = read(HEAD, chat("S" * 200, "next question"))
    assert isinstance(one, tuple) and isinstance(two, tuple) and len(one) >= 12
    assert two[: len(one) - 1] == one[:-1]  # only the last block differs (the closing bytes)


def test_a_body_cut_at_the_buffer_still_gives_its_beginning() -> None:
    body = chat("S" * 5000)
    read = extractor("prompt", OPTIONS)
    cut, whole = read(HEAD, body[:1000]), read(HEAD, body)
    assert isinstance(cut, tuple) and isinstance(whole, tuple) and len(cut) > 50
    assert whole[: len(cut)] == cut


def test_completions_prompt_and_what_has_no_prompt() -> None:
    assert prompt_bytes(b'{"prompt": "hello there"}') == b'"hello there"}'
    assert prompt_bytes(b"not json at all") is None
    assert prompt_bytes(b'{"input": "x"}') is None
    assert prompt_bytes(b'{"prompt": 5}') is None  # not a prompt's shape
    assert extractor("prompt", OPTIONS)(HEAD, b"") is None


def test_a_chunked_body_is_read_through_its_framing() -> None:
    body = chat("S" * 300)
    framed = [
        b"%x\r\n%s\r\n" % (len(body[:100]), body[:100]),
        b"%x\r\n%s\r\n" % (len(body[100:]), body[100:]),
    ]
    head = HEAD.replace(b"content-length: 10\r\n", b"transfer-encoding: chunked\r\n")
    read = extractor("prompt", OPTIONS)
    assert read_key(read, head, framed) == chain(prompt_bytes(body) or b"", 16)


def test_header_cookie_and_json_keys() -> None:
    assert extractor("header:x-session-id", OPTIONS)(HEAD, b"") == b"abc"
    assert extractor("header:X-Missing", OPTIONS)(HEAD, b"") is None
    assert extractor("cookie:sid", OPTIONS)(HEAD, b"") == b"s-42"
    assert extractor("cookie:nope", OPTIONS)(HEAD, b"") is None
    body = json.dumps({"user": "u1", "meta": {"a/b": [0, {"k": 7}]}}).encode()
    assert extractor("json:/user", OPTIONS)(HEAD, body) == b"u1"
    assert extractor("json:/meta/a~1b/1/k", OPTIONS)(HEAD, body) == b"7"
    assert extractor("json:/missing", OPTIONS)(HEAD, body) is None
    assert extractor("json:/user", OPTIONS)(HEAD, body[:-3]) is None  # truncated: no key
    assert extractor("json:/user", OPTIONS)(HEAD, b"\xff") is None
