"""A callee's exception as a handle's caller sees it: Ray's callers catch the
remote type (``except TypeError``), which Ray's RayTaskError allows; so must ours."""

from __future__ import annotations

import pytest

from steadyserve.serve import wire


def test_a_builtin_remote_error_is_caught_by_its_type_and_as_a_call_error() -> None:
    reader = wire.FrameReader(allow_pickle=False)
    reader.feed(wire.error_frame(TypeError("f() takes 0 positional arguments but 1 was given")))
    with pytest.raises(TypeError, match=r"takes 0 positional arguments") as caught:
        reader.values()
    assert isinstance(caught.value, wire.CallError)
    assert isinstance(caught.value, RuntimeError)
    assert str(caught.value) == "TypeError: f() takes 0 positional arguments but 1 was given"


@pytest.mark.parametrize("name", ["KeyError", "UnicodeDecodeError", "OSError"])
def test_builtins_with_their_own_text_keep_the_call_errors_text(name: str) -> None:
    error = wire.remote_error(name, "boom")
    assert isinstance(error, wire.CallError) and str(error) == f"{name}: boom"


@pytest.mark.parametrize("name", ["StopIteration", "StopAsyncIteration", "MyError", "SystemExit"])
def test_others_stay_plain_call_errors(name: str) -> None:
    assert type(wire.remote_error(name, "x")) is wire.CallError
