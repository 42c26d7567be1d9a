"""deploy's pruning rule: only what the file itself made goes down (pure)."""

from __future__ import annotations

from steadyserve.controller.ownership import fleet_owner, unlisted

OWNER = fleet_owner("/srv/fleet.yaml")


def test_only_services_this_file_made_are_taken_down() -> None:
    owners = {"a": OWNER, "b": "", "c": fleet_owner("/srv/other.yaml"), "d": OWNER}
    removed, kept = unlisted(["a", "b", "c", "d"], owners, ["d"], OWNER, prune_all=False)
    assert removed == ["a"]
    assert kept == [
        ("b", "made with steady up; --prune-all takes it down"),
        ("c", "made by another fleet file (/srv/other.yaml)"),
    ]


def test_prune_all_takes_down_everything_not_listed() -> None:
    owners = {"a": OWNER, "b": ""}
    assert unlisted(["a", "b"], owners, [], OWNER, prune_all=True) == (["a", "b"], [])


def test_no_file_owns_nothing() -> None:
    assert fleet_owner(None) == ""
    assert unlisted(["a"], {"a": ""}, [], "", prune_all=False)[0] == []
