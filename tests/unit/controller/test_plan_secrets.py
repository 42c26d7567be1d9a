"""One rule for what plans hide: the dry-run plan and the history text hide the same
values (those that may hold secrets)."""

from __future__ import annotations

from steadyserve.controller.updates import _shown
from steadyserve.core.changes import ChangeSet, FieldChange, may_hold_secret


def test_a_plan_hides_what_history_hides() -> None:
    for path, old, new in (
        ("service.user_config", {"token": "s3cret"}, {"token": "n3w"}),
        ("envs.API_KEY", "abc", "def"),
    ):
        assert may_hold_secret(path)
        assert _shown(path, old) == _shown(path, new) == "(set)"
        described = ChangeSet((FieldChange(path, old, new, "in_place", "why"),)).describe()
        assert "s3cret" not in described and "abc" not in described
    assert _shown("service.user_config", None) is None  # unset is not a secret
    assert not may_hold_secret("service.replicas")
    assert _shown("service.replicas", 3) == 3
