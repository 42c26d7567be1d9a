"""``steadyserve.serve``: the decorator's options, .options(), .bind() graphs, their
description for the converter, the runner's node lookup, and the wire format."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steadyserve import serve
from steadyserve.replica.loader import load
from steadyserve.serve import wire
from steadyserve.serve.errors import LoadError
from steadyserve.serve.graph import describe_app
from steadyserve.serve.handle import DeploymentHandle
from steadyserve.serve.names import attr_name, default_service_name


@serve.deployment(name="Translator", num_replicas=2, user_config={"language": "french"})
class _Translator:
    def translate(self, text: str) -> str:
        return text


@serve.deployment
class _Summarizer:
    def __init__(self, translator: Any, *, extra: Any = None) -> None:
        self.translator = translator

    def __call__(self, request: object) -> str:
        return "summary"


def test_decorator_accepts_rays_options_and_options_copies() -> None:
    assert _Translator.name == "Translator"
    assert _Summarizer.name == "_Summarizer"
    faster = _Translator.options(num_replicas=4, max_queued_requests=10)
    assert faster.user_options["num_replicas"] == 4
    assert _Translator.user_options["num_replicas"] == 2  # the original is untouched
    assert isinstance(_Translator(), _Translator.func_or_class)  # usable directly


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"num_replicas": 0}, ValueError, "num_replicas=0"),
        ({"max_queued_requests": -2}, ValueError, "max_queued_requests=-2"),
        ({"autoscaling_config": 3}, ValueError, "autoscaling_config"),
        ({"name": ""}, ValueError, "name=''"),
        ({"no_such_option": 1}, TypeError, "unknown option 'no_such_option'"),
    ],
)
def test_bad_options_name_the_option(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        serve.deployment(**options)


def test_an_option_that_does_not_apply_is_said_once(capsys: pytest.CaptureFixture[str]) -> None:
    @serve.deployment(ray_actor_options={"num_gpus": 1})
    class Gpu:
        pass

    assert "ray_actor_options does not apply" in capsys.readouterr().err


def test_batch_multiplexed_and_model_ids_are_supported() -> None:
    assert callable(serve.batch(max_batch_size=8))
    assert callable(serve.multiplexed(max_num_models_per_replica=2))
    handle = DeploymentHandle("X").options(multiplexed_model_id="m")
    assert handle._model_id == "m"


def test_a_bound_graph_is_described_ingress_first_with_handle_placeholders() -> None:
    app = _Summarizer.bind(_Translator.bind(), extra=[1, "two"])
    described = describe_app(app, "text_ml:app")
    assert described == [
        {
            "name": "_Summarizer",
            "class_path": "text_ml:app",
            "service": "summarizer",
            "options": {},
            "ingress": True,
            "init_args": [{"__steady_handle__": "Translator"}],
            "init_kwargs": {"extra": [1, "two"]},
        },
        {
            "name": "Translator",
            "class_path": "text_ml:app.Translator",
            "service": "translator",
            "options": {
                "name": "Translator",
                "num_replicas": 2,
                "user_config": {"language": "french"},
            },
            "ingress": False,
            "init_args": [],
            "init_kwargs": {},
        },
    ]


def test_one_bound_node_used_twice_is_one_deployment_two_names_are_refused() -> None:
    shared = _Translator.bind()
    assert len(describe_app(_Summarizer.bind(shared, extra=shared), "m:app")) == 2
    with pytest.raises(Exception, match="two deployments in the graph are named 'Translator'"):
        describe_app(_Summarizer.bind(_Translator.bind(), extra=_Translator.bind()), "m:app")


@given(st.text(min_size=1, max_size=80))
def test_default_service_names_are_valid_service_names(name: str) -> None:
    from steadyserve.spec.errors import NAME_PATTERN

    assert NAME_PATTERN.fullmatch(default_service_name(name))
    assert attr_name(name).isidentifier()


GRAPH_MODULE = """
from steadyserve import serve

@serve.deployment(user_config={"n": 1})
class Leaf:
    def __init__(self, scale=1):
        self.scale = scale
    def reconfigure(self, config):
        pass

@serve.deployment(name="My Root")
class Root:
    def __init__(self, leaf, label="root"):
        self.leaf, self.label = leaf, label
    def __call__(self, request):
        return self.label

app = Root.bind(Leaf.bind(scale=3), label="top")

def build(args):
    return Root.bind(Leaf.bind(), label=args.get("label", "built"))
"""


@pytest.fixture
def graph_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    (tmp_path / "graph_mod.py").write_text(GRAPH_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield "graph_mod"
    sys.modules.pop("graph_mod", None)


def test_the_runner_hosts_the_ingress_or_the_named_node(
    graph_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = load(f"{graph_module}:app")
    assert root.kind == "deployment" and root.obj.__name__ == "Root"
    assert root.init_kwargs == {"label": "top"}
    (handle,) = root.init_args
    assert isinstance(handle, DeploymentHandle) and handle.service == "leaf"
    leaf = load(f"{graph_module}:app.Leaf")
    assert leaf.init_kwargs == {"scale": 3} and leaf.options == {"user_config": {"n": 1}}
    assert leaf.describe()["has_reconfigure"] is True
    # A builder gets STEADY_APP_ARGS; the service map renames a handle's target.
    monkeypatch.setenv("STEADY_APP_ARGS", json.dumps({"label": "from args"}))
    monkeypatch.setenv("STEADY_GRAPH_SERVICES", json.dumps({"Leaf": "app1-leaf"}))
    built = load(f"{graph_module}:build")
    assert built.init_kwargs == {"label": "from args"}
    assert built.init_args[0].service == "app1-leaf"
    assert load(f"{graph_module}:build.My_Root").obj.__name__ == "Root"


def test_a_missing_node_names_the_ones_there(graph_module: str) -> None:
    with pytest.raises(LoadError, match=r"no deployment named 'Lef' \(it has 'My Root', 'Leaf'\)"):
        load(f"{graph_module}:app.Lef")


def test_graph_cli_prints_json_and_fails_in_one_line(graph_module: str, tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "steadyserve.serve.graph", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )

    done = run(f"{graph_module}:build", "--args", '{"label": "x"}')
    assert done.returncode == 0, done.stderr
    described = json.loads(done.stdout)
    assert [d["name"] for d in described] == ["My Root", "Leaf"]
    assert described[0]["init_kwargs"] == {"label": "x"}
    assert described[1]["class_path"] == f"{graph_module}:build.Leaf"
    bad = run(f"{graph_module}:nothing")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        f"steadyserve.serve.graph: {graph_module}:nothing: no attribute 'nothing'"
    ]


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
        max_leaves=20,
    )
)
def test_json_values_round_trip_through_frames(value: Any) -> None:
    body = wire.encode(value, allow_pickle=False)
    assert body[:1] == wire.JSON
    assert wire.decode_one(body, allow_pickle=False) == value


def test_pickle_only_with_the_secret() -> None:
    value = {"when": (1, 2), "raw": b"\x00"}
    with pytest.raises(wire.NotSerialisable, match="graph secret"):
        wire.encode(value, allow_pickle=False)
    body = wire.encode(value, allow_pickle=True)
    assert body[:1] == wire.PICKLE
    assert wire.decode_one(body, allow_pickle=True) == value
    with pytest.raises(wire.WireError, match="without the graph secret"):
        wire.decode_one(body, allow_pickle=False)


def test_frames_split_anywhere_come_out_whole_and_errors_raise() -> None:
    stream = b"".join(wire.encode(w, allow_pickle=False) for w in ["a", "bc", "d"])
    stream += wire.error_frame(ValueError("bad  word"))
    reader = wire.FrameReader(allow_pickle=False)
    got: list[Any] = []
    with pytest.raises(wire.CallError, match="ValueError: bad word"):
        for i in range(len(stream)):
            reader.feed(stream[i : i + 1])
            got.extend(reader.values())
    assert got == ["a", "bc", "d"]


def test_the_cli_fills_service_fields_from_rays_options(tmp_path: Path) -> None:
    from steadyserve.client.python_defaults import with_deployment_defaults
    from steadyserve.spec import parse_service

    (tmp_path / "queued.py").write_text(
        "from steadyserve import deployment\n"
        "@deployment(name='Q', num_replicas=2, max_queued_requests=7,\n"
        "            graceful_shutdown_wait_loop_s=0.5)\n"
        "class Q:\n"
        "    def __call__(self, request):\n"
        "        return 'q'\n"
    )
    raw: dict[str, Any] = {"name": "q", "import_path": "queued:Q", "workdir": str(tmp_path)}
    spec = with_deployment_defaults(parse_service(raw, base_dir=tmp_path), raw, tmp_path)
    assert spec.service.replicas == 2
    assert spec.service.max_queued_requests == 7
    assert spec.service.graceful_shutdown_wait_loop_s == 0.5
