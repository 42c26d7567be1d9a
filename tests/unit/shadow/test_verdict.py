"""Judging a shadow step from the load balancers' counts (core/shadow/verdict.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from steadyserve.core.shadow.mask import MASK, masked
from steadyserve.core.shadow.verdict import MIN_NOISE_PAIRS, Limits, Tally, judge

LIMITS = Limits(max_diff_rate=0.01, min_compared=100)


def tally(
    signatures: dict[str, int], noise: dict[str, int] | None = None, pairs: int = 20
) -> Tally:
    return Tally(
        mirrored=sum(signatures.values()),
        compared=sum(signatures.values()),
        signatures=signatures,
        noise_pairs=pairs,
        noise=noise or {},
        examples={k: f"GET /{k}" for sig in signatures for k in sig.split("\n") if k},
    )


def test_a_dropped_field_in_two_percent_fails() -> None:
    verdict = judge(tally({"": 196, "removed $.total": 4}), LIMITS)
    assert verdict.outcome == "failed"
    assert (verdict.compared, verdict.differed) == (200, 4)
    assert verdict.top == (("removed $.total", 4, "GET /removed $.total"),)
    assert "max_shadow_diff_rate 1.00%" in verdict.reason


def test_identical_answers_pass() -> None:
    assert judge(tally({"": 200}), LIMITS).outcome == "passed"


def test_noise_learned_from_stable_pairs_is_taken_out() -> None:
    noisy = tally({"changed $.at": 200}, noise={"changed $.at": 20})
    verdict = judge(noisy, LIMITS)
    assert verdict.outcome == "passed" and verdict.differed == 0
    assert verdict.noise == ("changed $.at",)


def test_noise_covers_a_subtree_of_any_kind() -> None:
    t = tally({"removed $.meta.at": 150, "": 50}, noise={"changed $.meta": 1})
    assert judge(t, LIMITS).differed == 0


def test_noise_elsewhere_does_not_excuse() -> None:
    t = tally({"changed $.at\nremoved $.total": 10, "": 190}, noise={"changed $.at": 3})
    verdict = judge(t, LIMITS)
    assert verdict.outcome == "failed" and verdict.differed == 10
    assert [k for k, _, _ in verdict.top] == ["removed $.total"]


def test_status_is_never_noise() -> None:
    t = tally({"status": 10, "": 190}, noise={"status": 5})
    assert judge(t, LIMITS).differed == 10


def test_inconclusive_until_noise_and_enough_answers() -> None:
    assert judge(tally({"": 200}, pairs=MIN_NOISE_PAIRS - 1), LIMITS).outcome == "inconclusive"
    assert judge(tally({"": 99}), LIMITS).outcome == "inconclusive"
    off = Limits(max_diff_rate=0.01, min_compared=100, learn_noise=False)
    assert judge(tally({"": 100}, pairs=0), off).outcome == "passed"


def test_counts_add_over_workers_and_subtract_a_baseline() -> None:
    a = tally({"": 10, "removed $.x": 1})
    b = tally({"": 5}, noise={"changed $.at": 2})
    both = a.plus(b)
    assert both.compared == 16 and both.signatures == {"": 15, "removed $.x": 1}
    assert both.minus(a).signatures == {"": 5}
    assert both.minus(a).noise == {"changed $.at": 2}
    # A load balancer that restarted counts from zero: never a negative count.
    assert a.minus(both).compared == a.compared


def test_a_malformed_report_reads_as_nothing() -> None:
    bad = {"compared": -3, "signatures": {"x": "many", "": True}, "noise": [1], "examples": 5}
    assert Tally.from_json(bad) == Tally()
    good = tally({"": 3, "removed $.a": 1})
    assert Tally.from_json(good.to_json()) == good


# -- the example request: secrets masked ------------------------------------------------


def test_secret_query_values_are_masked() -> None:
    got = masked("GET", "/orders?api_key=abc123&page=2&token=zz")
    assert got == f"GET /orders?api_key={MASK}&page=2&token={MASK}"


def test_token_like_path_segments_are_masked() -> None:
    got = masked("GET", "/reset/eyJhbGciOiJIUzI1NiJ9abcdefghijk/x")
    assert got == f"GET /reset/{MASK}/x"


@given(
    st.sampled_from(["token", "apikey", "Secret", "password", "sig", "access_token", "code"]),
    st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=40),
)
def test_no_secret_value_survives(name: str, value: str) -> None:
    secret = "S3CR3T" + value
    assert secret not in masked("GET", f"/p?a=1&{name}={secret}&b=2")
