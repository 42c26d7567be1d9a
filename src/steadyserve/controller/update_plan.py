"""What an update would do, decided before anything is written: a pure function of
the running spec, the new one, their files' hashes and the replicas now.

It refuses what an update cannot change (the endpoint's port and TLS files),
classifies the change (in place or a restart, spec/changes.py), picks the update
strategy (in place, else the one asked for), and plays that strategy's steps for
the counts a dry run shows. controller/updates.py reads the files before it and
commits the version after it: the only I/O of an update.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from steadyserve.controller.errors import BadInput
from steadyserve.core.planner import ReplicaView
from steadyserve.core.states import UpdateMode
from steadyserve.core.strategies import UpdateCounts, selectable_modes, strategy_of
from steadyserve.core.update_counts import update_counts
from steadyserve.spec import ServiceSpec
from steadyserve.spec.changes import ChangeSet, classify, shown


@dataclass(frozen=True)
class UpdatePlan:
    """One update, described: what changes, how, and what it launches and drains."""

    changes: ChangeSet
    mode: UpdateMode
    counts: UpdateCounts
    mode_field: str
    """Where the mode came from, for a refusal: ``--mode`` or ``service.update_mode``."""
    requested_mode: str | None = None
    """``--mode`` as given: the restart an in-place change becomes when it cannot
    be applied in place by the time it commits (:meth:`restarting`)."""

    @property
    def in_place(self) -> bool:
        return not strategy_of(self.mode).restarts

    def restarting(self, spec: ServiceSpec) -> UpdatePlan:
        """This change as a restart update, by the mode asked for (or the file's)."""
        return replace(self, mode=chosen_mode(spec, self.requested_mode))

    def reply(self, name: str, version: int, dry_run: bool) -> dict[str, Any]:
        """The JSON ``steady update`` prints (client/contracts.py, ``PLAN``)."""
        if self.changes.empty:
            mode: str = "none"
            launch = stop = 0
        else:
            mode, launch, stop = self.mode, self.counts.launch, self.counts.drain
        return {
            "name": name,
            "changed": not self.changes.empty,
            "version": version,
            "mode": mode,
            "changes": [
                {
                    "path": c.path,
                    "old": shown(c.path, c.old),
                    "new": shown(c.path, c.new),
                    "kind": c.kind,
                    "why": c.why,
                }
                for c in self.changes.changes
            ],
            "launch": launch,
            "stop": stop,
            "dry_run": dry_run,
        }


def check_unchangeable(old: ServiceSpec, new: ServiceSpec, port: int) -> None:
    """What an update cannot change: the endpoint's port, its key and its TLS files
    (the load balancer reads them when it starts)."""
    if new.service.port is not None and new.service.port != port:
        raise BadInput(
            f"service.port: the endpoint port cannot change in an update "
            f"(it is {port}; take the service down and up again)"
        )
    if new.service.auth_key != old.service.auth_key:
        raise BadInput(
            "service.auth_key: the endpoint's key cannot change in an update"
            " (take the service down and up again)"
        )
    if new.service.tls != old.service.tls:
        raise BadInput(
            "service.tls: the endpoint's TLS files cannot change in an update"
            " (take the service down and up again)"
        )


def chosen_mode(spec: ServiceSpec, requested: str | None) -> UpdateMode:
    """The restart strategy asked for (``--mode``, else the file's), if a user may ask it."""
    mode = requested or spec.service.update_mode
    modes = selectable_modes()
    if mode not in modes:
        choices = " or ".join(modes)
        raise BadInput(f"update mode {mode}: use {choices}")
    return UpdateMode(mode)


def describe_update(
    old: ServiceSpec,
    new: ServiceSpec,
    *,
    old_hash: str | None,
    new_hash: str | None,
    requested_mode: str | None,
    replicas: Sequence[ReplicaView],
    next_version: int,
    in_place_possible: bool = True,
) -> UpdatePlan:
    """The update from ``old`` to ``new`` with the replicas as they are now.

    ``in_place_possible``: False while the service still converges with no update
    in flight (after an abort or a rollback, replicas of other versions run): a
    change of ``user_config`` then restarts, as it has no fleet to apply to."""
    changes = classify(old, new, old_workdir_hash=old_hash, new_workdir_hash=new_hash)
    in_place = not changes.needs_restart and in_place_possible
    mode = UpdateMode.IN_PLACE if in_place else chosen_mode(new, requested_mode)
    target = new.service.target_replicas
    counts = update_counts(
        mode,
        target,
        next_version,
        replicas,
        max_surge=new.service.max_surge_count(target),
        max_unavailable=new.service.max_unavailable_count(target),
    )
    field = "--mode" if requested_mode else "service.update_mode"
    return UpdatePlan(changes, mode, counts, field, requested_mode)
