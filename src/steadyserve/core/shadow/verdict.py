"""Judging a shadow step: how many compared answers of the new version differ, with
the noise learned from pairs of stable answers taken out.

The load balancers count, per new version, the requests they mirrored and dropped,
the answer pairs they compared and, for each pair, the set of keys on which the
two differed (its *signature*, core/shadow/compare.py), and the keys on which two
answers of the stable version to the same request differed (the *noise*, learned
as Diffy learns it: a share of the mirrored requests also goes to the stable
version a second time). The controller adds every worker's counts up
(:meth:`Tally.plus`), subtracts what it had when the shadow step began
(:meth:`Tally.minus`), and :func:`judge` decides.

An answer differs when its signature holds a key that is not noise. Noise is
learned across every request, not per URL, and judged when the verdict is asked,
so an answer compared before its noise was seen is not held against the version.
No verdict but inconclusive is given before ``MIN_NOISE_PAIRS`` stable pairs were
compared (unless noise learning is off) or with fewer than ``min_compared``
answers compared. ``status`` and ``no answer`` are never noise: a stable version that answers 503
now and then does not excuse a new one that answers 500 or none at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from steadyserve.core.shadow.compare import MORE, NO_ANSWER, STATUS, ignored, keys_of, path_of

MIN_NOISE_PAIRS = 10
# Distinct signatures, noise keys and examples a load balancer keeps per version;
# past that, new signatures count under OTHER (always differing), new noise keys
# and examples are not kept. A replica that answers with random field names cannot
# grow the load balancer's memory or its report.
MAX_SIGNATURES = 256
MAX_NOISE_KEYS = 256
OTHER = MORE
# A signature holds at most 33 keys of at most 200 characters (core/shadow/compare.py).
MAX_SIGNATURE_CHARS = 33 * 201
TOP_PATHS = 5
# Keys a stable pair's difference never excuses: a failure is not noise.
NEVER_NOISE = frozenset({STATUS, NO_ANSWER, OTHER})


@dataclass(frozen=True)
class Tally:
    """One new version's shadow counts (cumulative in a report, a difference in a step)."""

    mirrored: int = 0
    """Copies sent to the new version."""
    dropped: int = 0
    """Requests that would have been mirrored but were not (the new version was busy,
    not READY, or the request's body too large)."""
    compared: int = 0
    """Answer pairs compared (a mirrored copy that failed to connect is not one)."""
    signatures: Mapping[str, int] = field(default_factory=dict)
    """Signature (keys joined by newlines; "" for alike) -> answers."""
    noise_pairs: int = 0
    noise: Mapping[str, int] = field(default_factory=dict)
    """Key -> stable pairs that differed on it."""
    examples: Mapping[str, str] = field(default_factory=dict)
    """Key -> one request that differed on it, masked (core/shadow/mask.py)."""

    def plus(self, other: Tally) -> Tally:
        examples = dict(other.examples)
        examples.update(self.examples)
        return Tally(
            self.mirrored + other.mirrored,
            self.dropped + other.dropped,
            self.compared + other.compared,
            _add(self.signatures, other.signatures),
            self.noise_pairs + other.noise_pairs,
            _add(self.noise, other.noise),
            examples,
        )

    def minus(self, earlier: Tally) -> Tally:
        """The counts since ``earlier``; a count that went down (a load balancer
        restarted from zero) counts from zero."""
        return Tally(
            _sub(self.mirrored, earlier.mirrored),
            _sub(self.dropped, earlier.dropped),
            _sub(self.compared, earlier.compared),
            _sub_map(self.signatures, earlier.signatures),
            _sub(self.noise_pairs, earlier.noise_pairs),
            _sub_map(self.noise, earlier.noise),
            dict(self.examples),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "mirrored": self.mirrored,
            "dropped": self.dropped,
            "compared": self.compared,
            "signatures": dict(self.signatures),
            "noise_pairs": self.noise_pairs,
            "noise": dict(self.noise),
            "examples": dict(self.examples),
        }

    @classmethod
    def from_json(cls, data: Any) -> Tally:
        """Read a report's counts; anything malformed reads as nothing (a load
        balancer's report is another process's input)."""
        if not isinstance(data, dict):
            return cls()
        return cls(
            _count(data.get("mirrored")),
            _count(data.get("dropped")),
            _count(data.get("compared")),
            _counts(data.get("signatures"), MAX_SIGNATURES),
            _count(data.get("noise_pairs")),
            _counts(data.get("noise"), MAX_NOISE_KEYS),
            _strings(data.get("examples"), MAX_NOISE_KEYS),
        )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _counts(value: Any, cap: int) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    out: dict[str, int] = {}
    for key, n in list(value.items())[: cap * 64]:
        if isinstance(key, str) and len(key) <= MAX_SIGNATURE_CHARS and _count(n):
            out[key] = _count(n)
    return out


def _strings(value: Any, cap: int) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    items = [
        (k, v[:MAX_SIGNATURE_CHARS])
        for k, v in value.items()
        if isinstance(k, str) and isinstance(v, str) and len(k) <= MAX_SIGNATURE_CHARS
    ]
    return dict(items[: cap * 64])


def _add(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = dict(a)
    for key, n in b.items():
        out[key] = out.get(key, 0) + n
    return out


def _sub(a: int, b: int) -> int:
    return a - b if a >= b else a


def _sub_map(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    out = {}
    for key, n in a.items():
        left = _sub(n, b.get(key, 0))
        if left:
            out[key] = left
    return out


@dataclass(frozen=True)
class Limits:
    """``service.canary.analysis``'s shadow limits."""

    max_diff_rate: float | None = None
    min_compared: int = 100
    learn_noise: bool = True


@dataclass(frozen=True)
class ShadowVerdict:
    """passed, failed or inconclusive, with the figures ``steady status`` shows."""

    outcome: str
    reason: str
    compared: int = 0
    differed: int = 0
    top: tuple[tuple[str, int, str], ...] = ()
    """The most frequent differing keys: (key, answers, an example request)."""
    noise: tuple[str, ...] = ()

    @property
    def rate(self) -> float:
        return self.differed / self.compared if self.compared else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "reason": self.reason,
            "compared": self.compared,
            "differed": self.differed,
            "rate": round(self.rate, 6),
            "top_paths": [{"key": k, "answers": n, "example": e} for k, n, e in self.top],
            "noise": list(self.noise),
        }


def noise_of(tally: Tally) -> frozenset[str]:
    """The keys learned as noise (``status`` never is)."""
    return frozenset(k for k, n in tally.noise.items() if n > 0 and k not in NEVER_NOISE)


def excused(key: str, noise: frozenset[str]) -> bool:
    """Whether a differing ``key`` is noise: the same key, or a JSON path inside a
    noise path (``changed $.meta.at`` under noise ``changed $.meta``, any kind)."""
    if key in NEVER_NOISE:
        return False
    if key in noise:
        return True
    path = path_of(key)
    if path is None:
        return False
    paths = {p for p in (path_of(k) for k in noise) if p is not None}
    return ignored(path, paths)


def judge(tally: Tally, limits: Limits) -> ShadowVerdict:
    """The shadow verdict on ``tally`` (the counts since the shadow step began)."""
    noise = noise_of(tally)
    per_key: dict[str, int] = {}
    differed = 0
    for signature, n in tally.signatures.items():
        left = [k for k in keys_of(signature) if not excused(k, noise)]
        if left:
            differed += n
            for key in left:
                per_key[key] = per_key.get(key, 0) + n
    top = tuple(
        (key, n, tally.examples.get(key, ""))
        for key, n in sorted(per_key.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_PATHS]
    )
    compared = tally.compared
    learned = tuple(sorted(noise))

    def verdict(outcome: str, why: str) -> ShadowVerdict:
        return ShadowVerdict(outcome, why, compared, differed, top, learned)

    if limits.learn_noise and tally.noise_pairs < MIN_NOISE_PAIRS:
        why = (
            f"noise not learned yet: {tally.noise_pairs} of {MIN_NOISE_PAIRS} pairs of "
            f"stable answers compared ({compared} answers compared)"
        )
        return verdict("inconclusive", why)
    if compared < max(1, limits.min_compared):
        why = f"{compared} answers compared, min_shadow_compared {limits.min_compared} needed"
        return verdict("inconclusive", why)
    rate = differed / compared
    head = f"{differed} of {compared} compared answers differ ({rate:.2%})"
    if top:
        head += "; most: " + ", ".join(f"{k} ({n})" for k, n, _ in top[:3])
    top_rate = limits.max_diff_rate
    if top_rate is not None and rate > top_rate:
        return verdict("failed", f"{head} > max_shadow_diff_rate {top_rate:.2%}")
    return verdict("passed", head)
