"""The one owner of update state: a service's update in flight and everything it
steers (rollout/state.py's :class:`Rollout`): the update row, the canary step,
the hold of a paused rolling or blue-green update, the blue-green switch, and
the in-place delivery of ``user_config``, persisted through the store."""

from __future__ import annotations

from steadyserve.controller.rollout.state import Rollout

__all__ = ["Rollout"]
