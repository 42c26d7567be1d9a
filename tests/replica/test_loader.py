"""The loader: each kind of attribute detected, each import problem named in one line."""

from __future__ import annotations

import itertools
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from steadyserve.replica.loader import LoadError, load

_names = itertools.count()

WriteModule = Callable[[str], str]


@pytest.fixture
def write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WriteModule]:
    """Write a uniquely named module into a fresh sys.path entry; forget it afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    written: list[str] = []

    def write(source: str) -> str:
        name = f"replica_loader_mod_{next(_names)}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


def load_error(import_path: str) -> str:
    with pytest.raises(LoadError) as info:
        load(import_path)
    message = str(info.value)
    assert "\n" not in message
    return message


CLASSES = """
    from steadyserve.replica import deployment

    class Sync:
        def __call__(self, request):
            return "sync"

    class Async:
        async def __call__(self, request):
            return "async"

    class NoCall:
        pass

    @deployment
    class Bare:
        def __call__(self, request):
            return "bare"

    @deployment(num_replicas=2, user_config={"a": 1})
    class Configured:
        def reconfigure(self, config):
            pass

        def check_health(self):
            pass

        def __call__(self, request):
            return "configured"

    class Sub(Configured):
        pass

    class Outer:
        class Inner:
            def __call__(self, request):
                return "inner"

    def handler(request):
        return "function"

    NUMBER = 3
"""

ASGI = """
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def home(request):
        return PlainTextResponse("home")

    app = Starlette(routes=[Route("/", home)])

    async def bare_app(scope, receive, send):
        pass

    class Middleware:
        def __init__(self, app):
            self.app = app

        async def __call__(self, scope, receive, send):
            await self.app(scope, receive, send)

    wrapped = Middleware(app)

    async def not_asgi(request):
        return "one argument"
"""


@pytest.mark.parametrize(
    ("attr", "kind"),
    [("Sync", "class"), ("Async", "class"), ("Outer.Inner", "class"), ("Bare", "deployment")],
)
def test_classes_and_deployments_are_detected(
    write_module: WriteModule, attr: str, kind: str
) -> None:
    module = write_module(CLASSES)
    target = load(f"{module}:{attr}")
    assert target.kind == kind
    assert target.is_class
    assert target.import_path == f"{module}:{attr}"


def test_deployment_options_are_only_those_given(write_module: WriteModule) -> None:
    module = write_module(CLASSES)
    assert load(f"{module}:Bare").options == {}
    target = load(f"{module}:Configured")
    assert target.options == {"num_replicas": 2, "user_config": {"a": 1}}
    assert target.describe() == {
        "kind": "deployment",
        "options": {"num_replicas": 2, "user_config": {"a": 1}},
        "has_reconfigure": True,
        "has_check_health": True,
    }


def test_a_subclass_of_a_deployment_is_a_plain_class(write_module: WriteModule) -> None:
    module = write_module(CLASSES)
    target = load(f"{module}:Sub")
    assert target.kind == "class"
    assert target.describe()["has_reconfigure"] is True


@pytest.mark.parametrize("attr", ["app", "bare_app", "wrapped"])
def test_asgi_apps_are_detected(write_module: WriteModule, attr: str) -> None:
    module = write_module(ASGI)
    target = load(f"{module}:{attr}")
    assert target.kind == "asgi"
    assert not target.is_class
    assert target.describe() == {
        "kind": "asgi",
        "options": {},
        "has_reconfigure": False,
        "has_check_health": False,
    }


def test_missing_module_is_named() -> None:
    assert load_error("no_such_module_xyz:App") == (
        "cannot import module 'no_such_module_xyz' (No module named 'no_such_module_xyz')"
    )


def test_missing_package_of_a_submodule_is_named() -> None:
    message = load_error("no_such_pkg_xyz.models:App")
    assert message.startswith("cannot import module 'no_such_pkg_xyz.models' (")
    assert "No module named 'no_such_pkg_xyz'" in message


def test_missing_dependency_of_the_module_names_both(write_module: WriteModule) -> None:
    module = write_module("import torch_that_is_not_installed\n")
    message = load_error(f"{module}:App")
    assert message.startswith(f"cannot import module {module!r} (ModuleNotFoundError: ")
    assert "torch_that_is_not_installed" in message
    assert f"{module}.py:1" in message


def test_module_raising_at_import_names_the_error_and_line(write_module: WriteModule) -> None:
    module = write_module("x = 1\nraise RuntimeError('no GPU\\nfound')\n")
    message = load_error(f"{module}:App")
    assert message.startswith(f"cannot import module {module!r} (RuntimeError: no GPU found at ")
    assert message.endswith(f"{module}.py:2)")


def test_syntax_error_names_the_module(write_module: WriteModule) -> None:
    module = write_module("def broken(:\n")
    message = load_error(f"{module}:App")
    assert message.startswith(f"cannot import module {module!r} (SyntaxError: ")


def test_missing_attribute_is_named_with_a_suggestion(write_module: WriteModule) -> None:
    module = write_module("class Translator:\n    def __call__(self, request): ...\n")
    assert load_error(f"{module}:Translatr") == (
        f"module {module!r} has no attribute 'Translatr' (did you mean 'Translator'?)"
    )


def test_missing_nested_attribute_names_its_owner(write_module: WriteModule) -> None:
    module = write_module(CLASSES)
    message = load_error(f"{module}:Outer.Inr")
    assert message.startswith(f"'{module}:Outer' has no attribute 'Inr'")


@pytest.mark.parametrize(
    ("attr", "what"),
    [("handler", "a function"), ("NUMBER", "an int")],
)
def test_neither_class_nor_asgi_app_is_refused(
    write_module: WriteModule, attr: str, what: str
) -> None:
    module = write_module(CLASSES)
    message = load_error(f"{module}:{attr}")
    assert message == (
        f"'{module}:{attr}' is not a class, an ASGI app or a deployment (it is {what})"
    )


def test_one_argument_async_function_is_not_asgi(write_module: WriteModule) -> None:
    module = write_module(ASGI)
    assert "is not a class, an ASGI app or a deployment" in load_error(f"{module}:not_asgi")


def test_class_without_call_is_refused(write_module: WriteModule) -> None:
    module = write_module(CLASSES)
    assert load_error(f"{module}:NoCall") == (
        f"'{module}:NoCall' is a class without a __call__(self, request) method"
    )


@pytest.mark.parametrize("path", ["text_ml", "text_ml:", ":App", "text-ml:App", "a:b c"])
def test_malformed_import_path_is_refused(path: str) -> None:
    assert load_error(path) == f"invalid import path {path!r} (expected module.sub:attr)"
