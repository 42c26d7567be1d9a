"""Request-target normalisation (pure functions)."""

from __future__ import annotations

import pytest

from steadyserve.lb.target import BadTarget, is_blocked, is_plain, normalise


@pytest.mark.parametrize("target", [b"/", b"/echo", b"/a/b?x=1&y=/z", b"/v1/chat.completions"])
def test_plain_paths_are_returned_unchanged(target: bytes) -> None:
    assert is_plain(target)
    assert normalise(target, b"GET") == (target, None)


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (b"http://x/a?b", (b"/a?b", b"x")),
        (b"https://u:p@h:1/a", (b"/a", b"h:1")),
        (b"http://x", (b"/", b"x")),
        (b"http://x?q=1", (b"/?q=1", b"x")),
        (b"/a/./b/../c", (b"/a/c", None)),
        (b"/../../etc", (b"/etc", None)),
        (b"/a//b///c/", (b"/a/b/c/", None)),
        (b"/%7euser/%2e%2E/x", (b"/x", None)),
        (b"/a%2fb%3f?q=%2e", (b"/a%2Fb%3F?q=%2e", None)),
        (b"/a\\b", (b"/a/b", None)),
        (b"/a/.", (b"/a/", None)),
    ],
)
def test_normalise(target: bytes, expected: tuple[bytes, bytes | None]) -> None:
    assert normalise(target, b"GET") == expected


@pytest.mark.parametrize("target", [b"x:443", b"ftp://x/a", b"*", b"a/b", b""])
def test_unforwardable_targets(target: bytes) -> None:
    with pytest.raises(BadTarget):
        normalise(target, b"GET")


def test_asterisk_is_for_options_only() -> None:
    assert normalise(b"*", b"OPTIONS") == (b"*", None)


@pytest.mark.parametrize(
    "target",
    [b"/-/reconfigure", b"/-/reconfigure/", b"/-%2Freconfigure", b"/-/%2572econfigure"],
)
def test_blocked_spellings(target: bytes) -> None:
    blocked = frozenset({b"/-/reconfigure"})
    assert is_blocked(normalise(target, b"POST")[0], blocked)
    assert is_blocked(b"/-/reconfigure/?a", blocked)


def test_other_paths_are_not_blocked() -> None:
    blocked = frozenset({b"/-/reconfigure"})
    for target in (b"/", b"/-/reconfigured", b"/x/-/reconfigure", b"/-/reconfigure2"):
        assert not is_blocked(target, blocked)
