"""A bound deployment inside an object passed to ``.bind()`` (Ray's
test_deployment_handle_nested_in_obj): found as a node of the graph, and the
replica's constructor gets a copy of the object holding a handle instead."""

from __future__ import annotations

import threading
from typing import Any

from steadyserve import serve
from steadyserve.serve.deployment import replace_nodes


class Wrapper:
    def __init__(self, inner: Any) -> None:
        self.inner = inner


@serve.deployment
def f() -> str:
    return "hi"


class _Driver:
    def __init__(self, wrapper: Wrapper) -> None:
        self.wrapper = wrapper


Driver = serve.deployment(_Driver)  # called, not as a decorator: mypy sees a Deployment


def test_a_bound_deployment_in_an_object_is_a_node_and_is_replaced() -> None:
    inner = f.bind()
    wrapper = Wrapper({"handles": [inner]})
    app = Driver.bind(wrapper)
    assert [n.name for n in app.nodes()] == ["_Driver", "f"]
    (rebuilt,) = replace_nodes(list(app.args), lambda node: f"handle to {node.name}")
    assert isinstance(rebuilt, Wrapper) and rebuilt is not wrapper
    assert rebuilt.inner == {"handles": ["handle to f"]}
    assert wrapper.inner["handles"][0] is inner  # the driver's object is left as it was


def test_objects_holding_none_are_passed_as_they_are() -> None:
    plain = Wrapper(3)
    lock = Wrapper(threading.Lock())  # cannot be pickled: holds none that could ship
    assert replace_nodes([plain, lock], lambda node: None) == [plain, lock]
    assert [n.name for n in Driver.bind(lock).nodes()] == ["_Driver"]
