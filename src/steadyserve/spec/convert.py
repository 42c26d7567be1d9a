"""Pydantic's errors turned into our one-line messages."""

from __future__ import annotations

import difflib
import json
import re
import types
import typing
from typing import Any, TypeVar

from pydantic import (
    BaseModel,
    ValidationError,
)

from steadyserve.spec import peer_keys
from steadyserve.spec.errors import TOP_LEVEL, SpecError

# ----------------------------------------------------------- pydantic -> SpecError

_TYPE_MESSAGES = {
    "missing": "required",
    "extra_forbidden": "unknown field",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "dict_type": "must be a mapping",
    "list_type": "must be a list",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "invalid_key": "field names must be strings",
    "recursion_loop": "refers to itself",
}

_ALIASES = {
    "gpu": "accelerators",
    "gpus": "accelerators",
    "command": "run",
    "cmd": "run",
    "env": "envs",
    "environment": "envs",
    "env_vars": "envs",
    "num_replicas": "replicas",
    "autoscaling_config": "replica_policy",
    "autoscaling": "replica_policy",
}
"""Names from neighbouring tools (Ray Serve, Kubernetes, Compose) that spelling
distance would not find or would map wrongly (``gpus`` is not ``cpus``)."""

_SIMPLE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


Model = TypeVar("Model", bound=BaseModel)


def _validate(model: type[Model], data: object) -> Model:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _convert(exc, model) from None
    except RecursionError:
        raise SpecError(TOP_LEVEL, "nested too deeply") from None


def _convert(exc: ValidationError, root: type[BaseModel]) -> SpecError:
    """Every error, each as one plain line. Unknown fields go first: a misspelt field
    also shows up as a missing one, and the typo is the real cause, so a "required"
    for the very field a typo's hint names is left out."""
    errors = exc.errors(include_url=False, include_input=False)
    ordered = sorted(errors, key=lambda e: e["type"] != "extra_forbidden")
    found: list[tuple[str | None, str]] = []
    hinted: set[str] = set()
    for error in ordered:
        loc = list(error["loc"])
        if loc and loc[-1] == "[key]":  # a bad mapping key: report it at the key
            loc.pop()
        if error["type"] == "extra_forbidden":
            message = _unknown_field_message(root, loc)
            hint = _HINT.search(message)
            if hint:
                hinted.add(_format_loc([*loc[:-1], *hint.group(1).split(".")]))
        elif error["type"] in _TYPE_MESSAGES:
            message = _TYPE_MESSAGES[error["type"]]
        else:
            message = _plain(error["msg"])
        path = _format_loc(loc)
        if error["type"] == "missing" and path in hinted:
            continue
        if (path, message) not in found:
            found.append((path, message))
    (first_path, first_message), *more = found
    return SpecError(first_path, first_message, more=more)


_HINT = re.compile(r"did you mean ([\w.-]+)\?")


def _plain(msg: str) -> str:
    msg = msg.removeprefix("Value error, ").replace("Input should be", "must be")
    return msg[:1].lower() + msg[1:] if msg else "is invalid"


def _format_loc(loc: list[int | str]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _SIMPLE_KEY.fullmatch(part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part)}]"
    return text or TOP_LEVEL


def _unknown_field_message(root: type[BaseModel], loc: list[int | str]) -> str:
    known = peer_keys.refusal(loc)
    if known is not None:  # a SkyServe key: what it was there, what to write here
        return known
    key = loc[-1] if loc else None
    model = _model_at(root, loc[:-1])
    if model is None or not isinstance(key, str):
        return "unknown field"
    for name, info in model.model_fields.items():  # e.g. `replicas:` outside `service:`
        child = _find_model(info.annotation)
        is_list = typing.get_origin(info.annotation) is list
        if child is not None and child is not model and not is_list and key in child.model_fields:
            return f"unknown field (did you mean {name}.{key}?)"
    alias = _ALIASES.get(key.lower())
    if alias in model.model_fields:
        return f"unknown field (did you mean {alias}?)"
    close = difflib.get_close_matches(key.lower(), list(model.model_fields), n=1, cutoff=0.6)
    if close:
        return f"unknown field (did you mean {close[0]}?)"
    return "unknown field"


def _model_at(root: type[BaseModel], loc: list[int | str]) -> type[BaseModel] | None:
    model = root
    for part in loc:
        if isinstance(part, int):  # a list index: the item model was found with the field
            continue
        info = model.model_fields.get(part)
        found = _find_model(info.annotation) if info is not None else None
        if found is None:
            return None
        model = found
    return model


def _find_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        for arg in typing.get_args(annotation):
            found = _find_model(arg)
            if found is not None:
                return found
    return None
