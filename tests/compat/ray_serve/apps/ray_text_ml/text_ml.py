"""The Ray Serve docs' text_ml application as Ray users write it (``from ray
import serve`` untouched); only the models are stand-ins (no transformers here):
the Translator "translates" by naming its language, the Summarizer keeps the
first sentence. Each answers with its pid so tests can see in-place updates."""

import os

from ray import serve
from ray.serve.handle import DeploymentHandle
from starlette.requests import Request


@serve.deployment
class Translator:
    def __init__(self):
        self.language = "french"

    def translate(self, text: str) -> dict[str, object]:
        return {"translation": f"[{self.language}] {text}", "translator_pid": os.getpid()}

    def reconfigure(self, config: dict):
        self.language = config.get("language", "french")


@serve.deployment
class Summarizer:
    def __init__(self, translator: DeploymentHandle):
        self.translator = translator

    def summarize(self, text: str) -> str:
        return text.split(".")[0]

    async def __call__(self, http_request: Request) -> dict[str, object]:
        english_text: str = await http_request.json()
        summary = self.summarize(english_text)
        translation = await self.translator.translate.remote(summary)
        return {**translation, "summarizer_pid": os.getpid()}


app = Summarizer.bind(Translator.bind())
