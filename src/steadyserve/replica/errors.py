"""The loader's one error, in a module of its own so ``graph`` can raise it too."""

from __future__ import annotations


class LoadError(Exception):
    """An import path that does not lead to something the runner can host."""
