"""Ray Serve's exception names, for code that catches them."""

from __future__ import annotations


class RayServeException(Exception):
    """A Serve API used wrongly at run time (e.g. a batch function that lost items)."""
