"""examples/text_ml: the logic in-process, and the Translator as a real replica."""

from __future__ import annotations

import asyncio
import http.client
import importlib
import json
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

import pytest

from steadyserve.replica.app import ClassApp
from steadyserve.replica.user import UserClass
from steadyserve.spec import load_fleet_file
from tests.replica._asgi import Reply, call, host
from tests.replica._proc import HOST, Replica

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "text_ml"


@pytest.fixture(scope="module")
def text_ml() -> Iterator[ModuleType]:
    sys.path.insert(0, str(EXAMPLE))
    dont_write = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        yield importlib.import_module("text_ml")
    finally:
        sys.dont_write_bytecode = dont_write
        sys.path.remove(str(EXAMPLE))
        sys.modules.pop("text_ml", None)


@pytest.mark.parametrize(
    ("language", "expected"),
    [
        ("french", "Bonjour mon ami, le chat est dans le maison!"),
        ("german", "Hallo mein freund, der katze ist in der haus!"),
        ("spanish", "Hola mi amigo, el gato es en el casa!"),
    ],
)
def test_translation_is_word_by_word(text_ml: ModuleType, language: str, expected: str) -> None:
    text = "Hello my friend, the cat is in the house!"
    assert "".join(text_ml.translate_words(text, language)) == expected


def test_unknown_words_are_unchanged(text_ml: ModuleType) -> None:
    assert "".join(text_ml.translate_words("Kubernetes rocks", "french")) == "Kubernetes rocks"


def test_translator_reconfigure_refuses_an_unknown_language(text_ml: ModuleType) -> None:
    translator = text_ml.Translator()
    translator.reconfigure({"language": "german"})
    with pytest.raises(ValueError, match="language must be one of"):
        translator.reconfigure({"language": "klingon"})
    assert translator.language == "german"


def test_translator_answers_get_and_post(text_ml: ModuleType) -> None:
    async def scenario() -> tuple[Reply, Reply, Reply]:
        app, user = await host(text_ml.Translator.func_or_class)
        await user.reconfigure({"language": "spanish"})
        by_get = await call(app, query="text=good+morning")
        by_post = await call(app, "POST", body=json.dumps({"text": "thank you"}).encode())
        return by_get, by_post, await call(app)

    by_get, by_post, missing = asyncio.run(scenario())
    assert by_get.json()["translation"] == "bueno mañana"
    assert by_get.json()["language"] == "spanish"
    assert by_post.json()["translation"] == "gracias tú"
    assert missing.status == 400


def test_summarizer_picks_the_most_representative_sentence(text_ml: ModuleType) -> None:
    text = (
        "Replicas serve requests. The weather was nice. "
        "Requests reach replicas through the load balancer, and replicas answer requests."
    )
    assert text_ml.summarize(text) == "Replicas serve requests."
    assert text_ml.summarize(text, 5) == text


def test_fleet_file_is_valid() -> None:
    specs = {spec.name: spec for spec in load_fleet_file(EXAMPLE / "fleet.yaml")}
    assert set(specs) == {"translator", "summarizer"}
    assert specs["translator"].import_path == "text_ml:app.Translator"
    assert specs["translator"].service.replicas == 2
    assert specs["translator"].service.user_config == {"language": "french"}
    assert specs["summarizer"].import_path == "text_ml:app"
    assert specs["summarizer"].service.replicas == 1


def test_translator_replica_reconfigures_in_place_and_streams(tmp_path: Path) -> None:
    env = {"STEADY_USER_CONFIG": json.dumps({"language": "french"})}
    with Replica(EXAMPLE, "text_ml:Translator", env, log_dir=tmp_path) as replica:
        replica.wait_health(200)
        status, body = replica.app("/?text=Hello+my+friend")
        assert status == 200
        answer = json.loads(body)
        assert answer == {
            "translation": "Bonjour mon ami",
            "language": "french",
            "pid": replica.proc.pid,
        }
        assert replica.control("POST", "/-/reconfigure", {"language": "german"})[0] == 200
        answer = json.loads(replica.app("/?text=Hello+my+friend")[1])
        assert answer["translation"] == "Hallo mein freund"
        assert answer["pid"] == replica.proc.pid

        conn = http.client.HTTPConnection(HOST, replica.port, timeout=10)
        conn.request("GET", "/?text=good+night&stream=1")
        response = conn.getresponse()
        assert response.getheader("transfer-encoding") == "chunked"
        assert response.read() == b"gut nacht\n"
        conn.close()


def test_summarizer_calls_a_translator_replica_through_a_handle(
    text_ml: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real Translator replica; handles find it through STEADY_GRAPH_ROUTES."""
    from steadyserve.serve import DeploymentHandle
    from steadyserve.serve import handle as handle_module

    secret = "test-graph-secret"  # a replica takes handle calls only with it
    monkeypatch.setattr(handle_module, "_graph_secret", secret)
    env = {"STEADY_USER_CONFIG": json.dumps({"language": "spanish"}), "STEADY_GRAPH_SECRET": secret}
    with Replica(EXAMPLE, "text_ml:app.Translator", env, log_dir=tmp_path) as replica:
        replica.wait_health(200)
        routes = json.dumps({"translator": f"{HOST}:{replica.port}"})
        monkeypatch.setenv("STEADY_GRAPH_ROUTES", routes)
        handle = DeploymentHandle("Translator")
        assert handle.service == "translator"

        async def scenario() -> tuple[str, list[str]]:
            translated = await handle.translate.remote("good morning")
            words = [w async for w in handle.options(stream=True).words.remote("thank you")]
            return translated, words

        translated, words = asyncio.run(scenario())
        assert translated == "bueno mañana"
        assert words == ["gracias", " ", "tú"]
        # Sync code waits with .result(); the callee's exception is raised here.
        assert handle.translate.remote("my friend").result(timeout_s=30) == "mi amigo"
        with pytest.raises(RuntimeError, match="TypeError"):
            handle.translate.remote().result(timeout_s=30)

        async def summarize() -> Reply:
            # Built as the runner builds a graph node: the handle is its constructor argument.
            user = UserClass(text_ml.Summarizer.func_or_class, ThreadPoolExecutor(2), (handle,))
            await user.construct()
            body = json.dumps("Hello my friend. The cat.").encode()
            return await call(ClassApp(user), "POST", body=body)

        reply = asyncio.run(summarize())
        assert reply.status == 200 and reply.body == b"Hola mi amigo."


def test_the_ray_docs_languages_are_all_there(text_ml: ModuleType) -> None:
    translator = text_ml.Translator()
    for language in ("french", "german", "romanian"):
        translator.reconfigure({"language": language})
        assert translator.translate("good night") != "good night"
    assert translator.translate("Hello my friend") == "Salut meu prieten"
