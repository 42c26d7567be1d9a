"""The Ray Serve docs' text_ml app, written for SteadyServe with no model weights:
deterministic word-level stand-ins for the translation and summarization models.

As in the Ray docs, ``Summarizer`` calls ``Translator`` through a handle, the
translator's language is a ``user_config`` applied by ``reconfigure()``, and
``app = Summarizer.bind(Translator.bind())`` is the application:

    steady deploy examples/text_ml/serve_config.yaml   # Ray's config format
    steady deploy examples/text_ml/fleet.yaml          # the same graph as a fleet file
    curl -s -X POST http://127.0.0.1:PORT/ -d '"Hello my friend. The cat is in the house."'

Change ``language: french`` to ``german`` and deploy again: the running
translator replicas answer in German without restarting (same pids).
Only the import lines differ from the Ray docs' file.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from steadyserve import serve
from steadyserve.serve.handle import DeploymentHandle

LANGUAGES = ("french", "german", "spanish", "romanian")  # the Ray docs': French, German, Romanian
DICTIONARY: dict[str, dict[str, str]] = {
    # english: (french, german, spanish, romanian)
    word: dict(zip(LANGUAGES, translations, strict=True))
    for word, translations in {
        "hello": ("bonjour", "hallo", "hola", "salut"),
        "goodbye": ("au revoir", "auf wiedersehen", "adiós", "la revedere"),
        "good": ("bon", "gut", "bueno", "bun"),
        "morning": ("matin", "morgen", "mañana", "dimineață"),
        "night": ("nuit", "nacht", "noche", "noapte"),
        "day": ("jour", "tag", "día", "zi"),
        "my": ("mon", "mein", "mi", "meu"),
        "your": ("ton", "dein", "tu", "tău"),
        "friend": ("ami", "freund", "amigo", "prieten"),
        "friends": ("amis", "freunde", "amigos", "prieteni"),
        "the": ("le", "der", "el", "cel"),
        "a": ("un", "ein", "un", "un"),
        "and": ("et", "und", "y", "și"),
        "or": ("ou", "oder", "o", "sau"),
        "is": ("est", "ist", "es", "este"),
        "are": ("sont", "sind", "son", "sunt"),
        "in": ("dans", "in", "en", "în"),
        "on": ("sur", "auf", "sobre", "pe"),
        "with": ("avec", "mit", "con", "cu"),
        "i": ("je", "ich", "yo", "eu"),
        "you": ("tu", "du", "tú", "tu"),
        "we": ("nous", "wir", "nosotros", "noi"),
        "they": ("ils", "sie", "ellos", "ei"),
        "have": ("avoir", "haben", "tener", "avea"),
        "like": ("aime", "mag", "gusta", "place"),
        "love": ("amour", "liebe", "amor", "dragoste"),
        "cat": ("chat", "katze", "gato", "pisică"),
        "dog": ("chien", "hund", "perro", "câine"),
        "house": ("maison", "haus", "casa", "casă"),
        "city": ("ville", "stadt", "ciudad", "oraș"),
        "water": ("eau", "wasser", "agua", "apă"),
        "bread": ("pain", "brot", "pan", "pâine"),
        "book": ("livre", "buch", "libro", "carte"),
        "world": ("monde", "welt", "mundo", "lume"),
        "time": ("temps", "zeit", "tiempo", "timp"),
        "model": ("modèle", "modell", "modelo", "model"),
        "server": ("serveur", "server", "servidor", "server"),
        "fast": ("rapide", "schnell", "rápido", "rapid"),
        "slow": ("lent", "langsam", "lento", "lent"),
        "big": ("grand", "groß", "grande", "mare"),
        "small": ("petit", "klein", "pequeño", "mic"),
        "new": ("nouveau", "neu", "nuevo", "nou"),
        "old": ("vieux", "alt", "viejo", "vechi"),
        "yes": ("oui", "ja", "sí", "da"),
        "no": ("non", "nein", "no", "nu"),
        "thank": ("merci", "danke", "gracias", "mulțumesc"),
        "thanks": ("merci", "danke", "gracias", "mulțumesc"),
        "please": ("s'il vous plaît", "bitte", "por favor", "vă rog"),
        "today": ("aujourd'hui", "heute", "hoy", "azi"),
        "tomorrow": ("demain", "morgen", "mañana", "mâine"),
        "very": ("très", "sehr", "muy", "foarte"),
        "beautiful": ("beau", "schön", "hermoso", "frumos"),
    }.items()
}
_TOKENS = re.compile(r"\w+|[^\w\s]+|\s+")


def translate_words(text: str, language: str) -> list[str]:
    """Word by word; unknown words unchanged; a capitalised word stays capitalised."""
    out: list[str] = []
    for token in _TOKENS.findall(text):
        translated = DICTIONARY.get(token.lower(), {}).get(language)
        if translated is None:
            out.append(token)
        else:
            out.append(translated.capitalize() if token[:1].isupper() else translated)
    return out


async def text_of(request: Request) -> str | None:
    """``?text=`` on any method, else a JSON body: a string (as in the Ray docs)
    or ``{"text": ...}``."""
    text = request.query_params.get("text")
    if text is not None:
        return text
    body = await request.body()
    if not body:
        return None
    try:
        payload = await request.json()
    except ValueError:
        return None
    value = payload.get("text") if isinstance(payload, dict) else payload
    return value if isinstance(value, str) else None


def _missing_text() -> JSONResponse:
    return JSONResponse({"error": 'send ?text=... or a JSON body {"text": "..."}'}, 400)


@serve.deployment
class Translator:
    """English to French, German or Spanish; the language is a ``user_config``,
    so changing it reconfigures running replicas instead of restarting them."""

    def __init__(self) -> None:
        self.language = "french"

    def translate(self, text: str) -> str:
        """What ``Summarizer`` calls through its handle."""
        return "".join(translate_words(text, self.language))

    async def words(self, text: str) -> AsyncIterator[str]:
        """Streamed through a handle: ``translator.options(stream=True).words.remote()``."""
        for token in translate_words(text, self.language):
            yield token

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        language = user_config.get("language", "french")
        if language not in LANGUAGES:  # refuse before changing anything
            raise ValueError(f"language must be one of {', '.join(LANGUAGES)}, not {language!r}")
        self.language = language

    async def __call__(self, request: Request) -> Any:
        text = await text_of(request)
        if text is None:
            return _missing_text()
        language = self.language  # one request sees one language, even mid-reconfigure
        if request.query_params.get("stream") in ("1", "true"):
            return self._stream(text, language)
        return {
            "translation": "".join(translate_words(text, language)),
            "language": language,
            "pid": os.getpid(),
        }

    async def _stream(self, text: str, language: str) -> AsyncIterator[str]:
        """Token by token, as a generative model would send them."""
        for token in translate_words(text, language):
            yield token
            await asyncio.sleep(0.05)
        yield "\n"


STOPWORDS = frozenset(
    {"a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "from", "has", "have"}
    | {"he", "her", "his", "i", "in", "is", "it", "its", "of", "on", "or", "our", "she", "so"}
    | {"that", "the", "their", "them", "they", "this", "to", "was", "we", "were", "will"}
    | {"with", "you", "your"}
)
_SENTENCES = re.compile(r"(?<=[.!?])\s+")
_WORDS = re.compile(r"[a-z0-9']+")


def summarize(text: str, max_sentences: int = 1) -> str:
    """Extractive: the sentences whose words are most frequent in the whole text
    (stopwords ignored), in their original order."""
    sentences = [s.strip() for s in _SENTENCES.split(text.strip()) if s.strip()]
    if len(sentences) <= max_sentences:
        return " ".join(sentences)
    counts = Counter(w for w in _WORDS.findall(text.lower()) if w not in STOPWORDS)

    def score(sentence: str) -> float:
        words = [w for w in _WORDS.findall(sentence.lower()) if w not in STOPWORDS]
        return sum(counts[w] for w in words) / len(words) if words else 0.0

    best = sorted(range(len(sentences)), key=lambda i: (-score(sentences[i]), i))
    return " ".join(sentences[i] for i in sorted(best[:max_sentences]))


@serve.deployment
class Summarizer:
    """Summarizes English text, then has the ``Translator`` deployment translate
    the summary (a handle call, straight to the translator's replicas).
    ``?sentences=N`` keeps N sentences."""

    def __init__(self, translator: DeploymentHandle) -> None:
        self.translator = translator

    def summarize(self, text: str, max_sentences: int = 1) -> str:
        return summarize(text, max_sentences)

    async def __call__(self, http_request: Request) -> Any:
        english_text = await text_of(http_request)
        if english_text is None:
            return _missing_text()
        try:
            n = max(1, int(http_request.query_params.get("sentences", "1")))
        except ValueError:
            return JSONResponse({"error": "sentences must be an integer"}, 400)
        summary = self.summarize(english_text, n)
        translation: str = await self.translator.translate.remote(summary)
        return translation


app = Summarizer.bind(Translator.bind())
