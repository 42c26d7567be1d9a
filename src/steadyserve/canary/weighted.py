"""An exact weighted choice between version pools (smooth weighted round robin).

The load balancer picks a version first, then a replica of that version by the
service's policy. Picking the version at random would only meet the weight on
average; smooth weighted round robin (as nginx does it) is exact: after any n
picks, each version's count is within one of ``n * weight / total``, and the
picks are interleaved rather than bunched (10% is one in every ten, not ten in
a row every hundred).

A version with no eligible replica right now is skipped for that pick without
being charged, so the others keep their relative shares.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping


class SmoothWeighted:
    """Weighted choice among keys; ``pick`` is O(number of versions)."""

    __slots__ = ("_current", "_weights")

    def __init__(self, weights: Mapping[int, int]) -> None:
        self._weights = {k: w for k, w in sorted(weights.items()) if w > 0}
        self._current = dict.fromkeys(self._weights, 0)

    @property
    def weights(self) -> dict[int, int]:
        return dict(self._weights)

    def pick(self, eligible: Callable[[int], bool] | None = None) -> int | None:
        """The next key, or None when no key with a weight is eligible."""
        total = 0
        best: int | None = None
        current = self._current
        for key, weight in self._weights.items():
            if eligible is not None and not eligible(key):
                continue
            total += weight
            value = current[key] + weight
            current[key] = value
            if best is None or value > current[best]:
                best = key
        if best is not None:
            current[best] -= total
        return best
