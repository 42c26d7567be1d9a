"""The loader's one error, in a module of its own so the runner's loader and the
serve API's graph both raise it."""

from __future__ import annotations


class LoadError(Exception):
    """An import path that does not lead to something the runner can host."""
