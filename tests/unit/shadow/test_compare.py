"""Comparing the stable and the new version's answers to one request (core/shadow/compare.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steadyserve.core.shadow.compare import (
    BODY,
    LENGTH,
    MORE,
    STATUS,
    Answer,
    Rules,
    differences,
    ignored,
    normalise,
)

JSON = {"content-type": "application/json"}


def answer(body: Any, status: int = 200, **headers: str) -> Answer:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Answer(status, {**JSON, **headers}, data)


def test_alike_answers_have_no_difference() -> None:
    assert differences(answer({"a": 1}), answer({"a": 1})) == frozenset()


def test_a_dropped_field_is_removed_with_its_path() -> None:
    old = {"order": {"id": 7, "total": 12.5, "items": [{"sku": "a", "price": 3}]}}
    new = {"order": {"id": 7, "items": [{"sku": "a"}]}}
    assert differences(answer(old), answer(new)) == {
        "removed $.order.total",
        "removed $.order.items[*].price",
    }


def test_added_and_changed_fields() -> None:
    got = differences(answer({"a": 1, "b": [1, 2]}), answer({"a": 2, "b": [1, 2, 3], "c": None}))
    assert got == {"changed $.a", "added $.b[*]", "added $.c"}


def test_numbers_by_value_but_not_bools() -> None:
    assert differences(answer({"n": 1}), answer({"n": 1.0})) == frozenset()
    assert differences(answer({"n": 1}), answer({"n": True})) == {"changed $.n"}
    assert differences(answer({"n": "1"}), answer({"n": 1})) == {"changed $.n"}


def test_odd_keys_are_quoted_in_the_path() -> None:
    got = differences(answer({"a b": 1}), answer({"a b": 2}))
    assert got == {'changed $["a b"]'}


def test_status_class_only() -> None:
    assert differences(answer({}, 200), answer({}, 201)) == frozenset()
    assert differences(answer({"a": 1}, 200), answer({"b": 1}, 500)) == {STATUS}


def test_named_headers_compared_others_not() -> None:
    rules = Rules(headers=("cache-control",))
    a = answer({}, **{"cache-control": "max-age=60", "date": "Mon"})
    b = answer({}, **{"cache-control": "no-store", "date": "Tue"})
    assert differences(a, b, rules) == {"header:cache-control"}


def test_plain_bodies_byte_for_byte() -> None:
    a = Answer(200, {"content-type": "text/plain"}, b"hello")
    assert differences(a, Answer(200, {"content-type": "text/plain"}, b"hello")) == frozenset()
    assert differences(a, Answer(200, {"content-type": "text/plain"}, b"hellO")) == {BODY}


def test_json_against_not_json_is_a_body_difference() -> None:
    bad = Answer(200, JSON, b"{not json")
    assert differences(answer({"a": 1}), bad) == {BODY}


def test_an_incomplete_body_compares_status_and_headers_only() -> None:
    a = Answer(200, JSON, b'{"a": 1', complete=False)
    assert differences(a, answer({"b": 2})) == frozenset()


def test_streams_by_shape_not_text() -> None:
    sse = {"content-type": "text/event-stream"}

    def events(n: int, word: str) -> bytes:
        return b"".join(b"data: %s\n\n" % word.encode() for _ in range(n))

    a = Answer(200, sse, events(10, "hello"))
    assert differences(a, Answer(200, sse, events(11, "other words"))) == frozenset()
    assert differences(a, Answer(200, sse, events(3, "hello"))) == {LENGTH}


def test_ignore_takes_a_path_and_everything_under_it() -> None:
    rules = Rules(ignore=(normalise("$.meta"), normalise("$.items[0].at")))
    a = answer({"meta": {"t": 1}, "items": [{"at": 1, "v": 1}], "x": 1})
    b = answer({"meta": {"t": 2, "u": 3}, "items": [{"at": 2, "v": 1}], "x": 1})
    assert differences(a, b, rules) == frozenset()


@pytest.mark.parametrize("path", ["timestamp", "$.", "$..a", "$[x]", "$.a[-1]", "$.a b", 5])
def test_bad_paths_are_refused(path: Any) -> None:
    with pytest.raises(ValueError, match="is not a JSON path"):
        normalise(path)


def test_too_many_paths_are_cut() -> None:
    a = answer({f"k{i}": i for i in range(100)})
    b = answer({f"k{i}": -i - 1 for i in range(100)})
    got = differences(a, b)
    assert MORE in got and len(got) == 33


def test_a_deep_body_is_compared_byte_for_byte() -> None:
    deep_a = b"[" * 200 + b"1" + b"]" * 200
    deep_b = b"[" * 200 + b"2" + b"]" * 200
    assert differences(Answer(200, JSON, deep_a), Answer(200, JSON, deep_b)) == {BODY}


# -- properties ------------------------------------------------------------------------

keys = st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=6)
scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=4)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=20,
)
objects = st.dictionaries(keys, values, min_size=1, max_size=5)


@given(values)
def test_any_answer_is_alike_itself(value: Any) -> None:
    assert differences(answer(value), answer(json.loads(json.dumps(value)))) == frozenset()


@given(objects, objects)
def test_swapping_the_answers_swaps_added_and_removed(a: Any, b: Any) -> None:
    swap = {"added": "removed", "removed": "added", "changed": "changed"}

    def swapped(found: frozenset[str]) -> set[str]:
        out = set()
        for key in found:
            kind, _, path = key.partition(" ")
            out.add(f"{swap[kind]} {path}" if kind in swap else key)
        return out

    assert swapped(differences(answer(a), answer(b))) == set(differences(answer(b), answer(a)))


@given(objects, st.data())
def test_a_removed_field_is_always_found(obj: dict[str, Any], data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(sorted(obj)))
    smaller = {k: v for k, v in obj.items() if k != key}
    found = differences(answer(obj), answer(smaller))
    path = f"$.{key}" if key[0].isalpha() else f"$[{json.dumps(key)}]"
    assert found == {f"removed {path}"}


@settings(max_examples=200)
@given(objects, objects, st.lists(st.sampled_from(["$.a", "$.b", "$.a[*]", "$.c.d"]), max_size=3))
def test_nothing_under_an_ignored_path_is_ever_reported(
    a: dict[str, Any], b: dict[str, Any], ignore: list[str]
) -> None:
    a.setdefault("a", [1]), b.setdefault("a", {"x": 2})
    found = differences(answer(a), answer(b), Rules(ignore=tuple(ignore)))
    for key in found:
        path = key.partition(" ")[2]
        assert not ignored(path, set(ignore)), (key, ignore)


def test_a_hostile_field_name_is_cut() -> None:
    """A replica answering with 64 KiB field names must not make the load balancer
    keep 64 KiB keys (its counts keep up to 256 signatures of 33 keys)."""
    name = "k" * 60_000
    got = differences(answer({name: 1}), answer({name: 2}))
    assert len(got) == 1 and all(len(k) == 200 and k.endswith("...") for k in got)
