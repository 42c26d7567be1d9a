"""One rule for what plans hide: the dry-run plan and the history text hide the same
values (secrets), and show every other value, in `update` and `deploy` alike (one
function builds both plans). A `user_config` change showed as `(set)` `(set)`."""

from __future__ import annotations

from steadyserve.spec.changes import ChangeSet, FieldChange, may_hold_secret, shown


def test_a_plan_hides_what_history_hides() -> None:
    for path, old, new in (("envs.API_KEY", "abc", "def"), ("secrets.HF_TOKEN", "abc", "d")):
        assert may_hold_secret(path)
        assert shown(path, old) == shown(path, new) == "(set)"
        described = ChangeSet((FieldChange(path, old, new, "in_place", "why"),)).describe()
        assert "abc" not in described
    old = {"message": "hello", "token": "s3cret"}
    new = {"message": "hi", "token": "n3w"}
    described = ChangeSet(
        (FieldChange("service.user_config", old, new, "in_place", "why"),)
    ).describe()
    assert "s3cret" not in described and "n3w" not in described
    assert shown("service.user_config", None) is None  # unset is not a secret
    assert not may_hold_secret("service.replicas")
    assert shown("service.replicas", 3) == 3


def test_non_secret_values_show_in_full() -> None:
    config = {"message": "hello", "token": "s3cret", "model": {"name": "m", "api_key": "k"}}
    assert shown("service.user_config", config) == {
        "message": "hello",
        "token": "(set)",
        "model": {"name": "m", "api_key": "(set)"},
    }
    assert shown("service.user_config", ["a", {"password": "p"}]) == ["a", {"password": "(set)"}]
    assert shown("envs.MESSAGE", "hello again") == "hello again"
    assert shown("envs.HF_TOKEN", "hf_x") == shown("envs.db_password", "x") == "(set)"
