"""An exact weighted choice between version pools: shuffled rounds.

The load balancer picks a version first, then a replica of that version by the
service's policy. Picking the version at random would only meet the weight on
average, and a strict weighted round robin (nginx's smooth one: 80/20 is always
1,1,2,1,1) is exact but periodic, so a client whose requests arrive in step
with the period sees a skewed share. Here the weights, divided by their
greatest common divisor, make a round (80/20 is a round of 5: four 1s and one
2); each round is shuffled and dealt out in order. After every whole round the
counts are exactly the weights; within a round they are off by less than one
round; and no periodic pattern exists for a client to fall into.

A version with no eligible replica right now is skipped for that pick: the
next slot of an eligible version is dealt instead, and the skipped slot waits
for a later pick (a round with only ineligible slots left starts afresh).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from functools import reduce


class SmoothWeighted:
    """Weighted choice among keys; ``pick`` is O(1) unless slots are skipped."""

    __slots__ = ("_deck", "_random", "_round", "_weights")

    def __init__(self, weights: Mapping[int, int], rng: random.Random | None = None) -> None:
        self._weights = {k: w for k, w in sorted(weights.items()) if w > 0}
        divisor = reduce(math.gcd, self._weights.values(), 0) or 1
        self._round = [k for k, w in self._weights.items() for _ in range(w // divisor)]
        self._random = rng or random.Random()
        self._deck: list[int] = []

    @property
    def weights(self) -> dict[int, int]:
        return dict(self._weights)

    @property
    def round_length(self) -> int:
        return len(self._round)

    def _deal(self) -> None:
        deck = list(self._round)
        self._random.shuffle(deck)
        deck.reverse()  # dealt from the end: list.pop() is O(1)
        self._deck = deck

    def pick(self, eligible: Callable[[int], bool] | None = None) -> int | None:
        """The next key, or None when no key with a weight is eligible."""
        if not self._round:
            return None
        if eligible is None:
            if not self._deck:
                self._deal()
            return self._deck.pop()
        for _ in range(2):
            deck = self._deck
            for i in range(len(deck) - 1, -1, -1):
                if eligible(deck[i]):
                    return deck.pop(i)
            self._deal()
        return None
