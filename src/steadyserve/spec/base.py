"""The base of every spec model: strict, frozen, defaults in normal form."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from steadyserve.spec.errors import _fail


class _Model(BaseModel):
    """Base of every spec model.

    Unknown fields are errors (a typo must not silently mean "default"); models are
    frozen because a spec is a value stored per version and compared, never edited
    (use ``model_copy(update=...)``); defaults are validated so they are stored in
    the same normal form as user input (``600`` -> ``600.0``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    @model_validator(mode="before")
    @classmethod
    def _plain_keys_and_null_sections(cls, data: Any) -> Any:
        """Field names must be strings, and ``section:`` left empty in YAML (null)
        means that section's defaults: it is what commenting out its lines leaves."""
        if not isinstance(data, dict):
            return data
        for key in data:
            if not isinstance(key, str):
                raise _fail("field names must be strings (got {got})", got=repr(key)[:40])
        fields = cls.model_fields
        return {
            key: value
            for key, value in data.items()
            if not (value is None and key in fields and fields[key].default_factory is not None)
        }
