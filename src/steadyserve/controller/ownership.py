"""Which services a fleet file owns (pure): ``steady deploy`` takes down only what
its own file made, as ``kubectl apply --prune`` prunes only what its selector owns."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def fleet_owner(spec_file: str | None) -> str:
    """The owner recorded for services a fleet file makes (its absolute path)."""
    return f"fleet:{spec_file}" if spec_file else ""


def unlisted(
    running: Iterable[str],
    owners: Mapping[str, str],
    listed: Iterable[str | None],
    owner: str,
    prune_all: bool,
) -> tuple[list[str], list[tuple[str, str]]]:
    """Running services the file does not list: those to take down (made by this
    file, or all with ``prune_all``), and those kept with the reason (made by
    ``steady up`` or by another fleet file)."""
    wanted = set(listed)
    removed: list[str] = []
    kept: list[tuple[str, str]] = []
    for name in [n for n in running if n not in wanted]:
        made_by = owners.get(name, "")
        if prune_all or (owner and made_by == owner):
            removed.append(name)
        elif made_by:
            source = made_by.removeprefix("fleet:")
            kept.append((name, f"made by another fleet file ({source})"))
        else:
            kept.append((name, "made with steady up; --prune-all takes it down"))
    return removed, kept
