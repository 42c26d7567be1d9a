"""Whatever a request carries, reading its routing key fails only into "no key".

Searched, not only exemplified: hypothesis generates heads (headers, cookies,
multiplexed model ids) and bodies (JSON with lone surrogates and deep nesting,
prompts, bytes that are not JSON) and runs them through every request-aware
policy the balancer builds, checking that the key is read without an exception
and that a replica is then chosen exactly as for a request with no key when the
key is None. ``parse_bounded`` is checked differentially against the real JSON
parser's view of each document's depth.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from steadyserve.core.routing.multiplex import MODEL_ID_HEADER
from steadyserve.core.routing.options import PolicyOptions
from steadyserve.lb.balancer import Balancer
from steadyserve.lb.request_key import (
    MAX_JSON_DEPTH,
    extractor,
    parse_bounded,
    read_key,
)
from steadyserve.wire.routes import ReplicaRoute, RouteTable

# Regression inputs found by hand and by the search below (each once hung its
# connection in a real load balancer).
KNOWN_BAD = [
    b'{"user": "\\ud800"}',  # a lone surrogate: UnicodeEncodeError when hashed
    b"[" * 30000,  # RecursionError in the parser
    b'{"user": ' + b"[" * 30000 + b"}",
    b'{"user": {"a": "\\udfff\\ud800"}}',
]

KEYS = [
    "prompt",
    "header:X-Session-ID",
    "cookie:sid",
    "json:/user",
    "json:/a/0/b",
    "json:",
    "json:/~1~0/",
]


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


texts = st.text(st.characters(codec=None), max_size=20) | st.sampled_from(
    ["\ud800", "\udfff", "x\ud83d", "~1", "/", ""]
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=40,
)


@st.composite
def nested(draw: st.DrawFn) -> bytes:
    """A JSON document nested around the depth limit, its brackets mixed."""
    n = draw(st.integers(MAX_JSON_DEPTH - 3, MAX_JSON_DEPTH + 3))
    opens = draw(st.lists(st.sampled_from(["[", '{"k":']), min_size=n, max_size=n))
    closes = "".join("]" if o == "[" else "}" for o in reversed(opens))
    filler = draw(st.sampled_from(["1", '"[[[{"', '"\\\\"', '"\\""', "[]"]))
    return ("".join(opens) + filler + closes).encode()


def body_bytes() -> st.SearchStrategy[bytes]:
    return st.one_of(
        json_values.map(
            lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")
        ),
        json_values.map(lambda v: json.dumps({"user": v, "prompt": v}).encode()),
        json_values.map(lambda v: json.dumps({"messages": [{"content": v}]}).encode()),
        nested(),
        st.binary(max_size=300),
        st.sampled_from(KNOWN_BAD),
        st.integers(1, 40000).map(lambda n: b"[" * n),
        st.integers(1, 5000).map(lambda n: b'{"user": "' + b"\\" * n + b'"}'),
    )


header_values = st.binary(max_size=60).filter(lambda b: b"\r" not in b and b"\n" not in b)


@st.composite
def heads(draw: st.DrawFn) -> bytes:
    lines = [b"POST /v1/chat/completions HTTP/1.1", b"Host: x"]
    for name in draw(
        st.lists(
            st.sampled_from([b"X-Session-ID", b"Cookie", MODEL_ID_HEADER.encode(), b"X-Other"]),
            max_size=4,
        )
    ):
        lines.append(name + b":" + draw(header_values))
    if draw(st.booleans()):
        lines.append(b"Transfer-Encoding: chunked")
    return b"\r\n".join(lines) + b"\r\n\r\n"


def table(policy: str, multiplexed: bool, key: str) -> RouteTable:
    options = PolicyOptions(affinity_key=key if key != "prompt" else None)
    replicas = tuple(
        ReplicaRoute(i, 1, "127.0.0.1", 9000 + i, models=frozenset({"m1"}) if i == 2 else None)
        for i in (1, 2, 3)
    )
    return RouteTable("e", 1, policy, 4, -1, replicas, options=options, multiplexed=multiplexed)


@settings(max_examples=400)
@given(
    key=st.sampled_from(KEYS),
    head=heads(),
    body=body_bytes(),
    chunks=st.integers(1, 3),
)
def test_reading_a_key_never_raises(key: str, head: bytes, body: bytes, chunks: int) -> None:
    read = extractor(key, PolicyOptions(block_bytes=16))
    step = max(1, len(body) // chunks)
    pending = [body[i : i + step] for i in range(0, len(body), step)]
    value = read_key(read, head, pending)
    assert value is None or isinstance(value, (bytes, tuple))


@settings(max_examples=200)
@given(
    route=st.sampled_from(
        [
            ("session_affinity", "header:X-Session-ID"),
            ("session_affinity", "cookie:sid"),
            ("session_affinity", "json:/user"),
            ("prefix_affinity", "prompt"),
            ("least_load", "prompt"),
            ("instance_aware_least_load", "prompt"),
        ]
    ),
    multiplexed=st.booleans(),
    head=heads(),
    body=body_bytes(),
)
def test_every_request_aware_policy_routes_whatever_the_request(
    route: tuple[str, str], multiplexed: bool, head: bytes, body: bytes
) -> None:
    policy, key = route
    balancer = Balancer(table(policy, multiplexed, key))
    replica = (
        balancer.choose(None)
        if balancer.read_key is None
        else balancer.choose(None, None, read_key(balancer.read_key, head, [body]))
    )
    assert replica is not None  # three free replicas: a request is always placed


@settings(max_examples=300)
@given(value=json_values)
def test_parse_bounded_agrees_with_the_parser_on_depth(value: Any) -> None:
    text = json.dumps(value).encode()
    assert parse_bounded(text) == (depth(value) <= MAX_JSON_DEPTH)


@given(doc=nested())
def test_parse_bounded_near_the_limit(doc: bytes) -> None:
    assert parse_bounded(doc) == (depth(json.loads(doc)) <= MAX_JSON_DEPTH)


def test_known_bad_bodies_read_as_no_key_or_a_key() -> None:
    read = extractor("json:/user", PolicyOptions())
    assert read_key(read, b"POST / HTTP/1.1\r\n\r\n", [KNOWN_BAD[0]]) == "\ud800".encode(
        "utf-8", "surrogatepass"
    )
    for body in KNOWN_BAD[1:3]:
        assert read_key(read, b"POST / HTTP/1.1\r\n\r\n", [body]) is None
