"""Which versions have served and which are broken: SkyServe's early-failure rule.

A version whose replica fails before any replica of it was ever READY is
broken: not relaunched, so a bug does not become a crash loop (docs/design.md,
"Probes and failure rules"). One READY replica clears it. The runtime holds one
:class:`VersionJudge` per service; its sets are what the planner and the rollout read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


class VersionJudge:
    def __init__(
        self,
        ready: Iterable[int],
        broken: Iterable[int],
        record: Callable[[str], None],
        keep: Callable[[int], None] = lambda version: None,
    ) -> None:
        self.ready: set[int] = set(ready)
        """Versions that served (a replica of which has been READY)."""
        self.broken: set[int] = set(broken)
        """Versions judged broken: never relaunched."""
        self._record = record
        self._keep = keep  # stores that a version served, for a restarted controller

    def judge(self, version: int) -> None:
        """A replica of ``version`` failed before it was ready: broken if none ever was."""
        if version not in self.ready and version not in self.broken:
            self.broken.add(version)
            self._record(f"version {version} failed before any replica was ready; not relaunching")

    def served(self, version: int) -> None:
        """A replica of ``version`` turned READY: the version serves, so it is not broken."""
        if version not in self.ready:
            self._keep(version)
        self.ready.add(version)
        self.broken.discard(version)
