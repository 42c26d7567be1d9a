"""SkyPilot's own unit tests of a managed job's recovery, ported.

Source: repository skypilot-org/skypilot, path
tests/unit_tests/test_sky/jobs/test_recovery_strategy.py, commit
56c021fa3ac6e445b21073e7eef7ab1e846f4415. The classes TestShouldRestartOnFailure,
TestStrategyExecutorInit and TestStrategyExecutorMake, each case with its inputs
and expected values as written; only the call surface is translated.

SkyPilot's ``StrategyExecutor`` holds a job's ``max_restarts_on_errors``,
``recover_on_exit_codes`` and ``restart_cnt_on_failure``, and
``should_restart_on_failure(exit_codes)`` decides. Here a job's
``resources.job_recovery`` is read by the job file's reader
(``steadyserve.compat.sky_jobs.job_recovery``) and the controller's
(``steadyserve.controller.pool_api.job_recovery``) into a ``JobRecovery``, the
decision is ``steadyserve.core.jobs.restart_on_failure`` (what the pool's
controller applies to a job that failed by itself: ``after_exit``), and the
count is the job's ``restarts_on_errors``. :class:`StrategyExecutor` below only
carries the count between calls, as SkyPilot's executor does; nothing in it
decides. ``StrategyExecutor.make`` takes a task's ``job_recovery``: here the
``resources.job_recovery`` of a job file, read as ``steady jobs launch`` reads it.

The four cases of TestStrategyExecutorMake were transcribed by their inputs and
expected strategies, not their function names: they are named here for what they
pass. Left out: the rest of the source file tests SkyPilot internals with no
counterpart here (its cluster launch, mocked, and its logger's handlers).
The last case of TestStrategyExecutorMake (a mapping with ``strategy: FAILOVER``,
``max_restarts_on_errors: 5`` and ``recover_on_exit_codes: [42, 137]``) was
transcribed without its assertions after the strategy: it asserts that the
strategy is FAILOVER, and, so that the case can fail on the rest of its input,
that the limit and the codes it gave are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from steadyserve.compat import sky_jobs
from steadyserve.controller import pool_api
from steadyserve.core.jobs import JobRecovery, restart_on_failure


def _recovery(job_recovery: Any) -> JobRecovery:
    """A job file's ``resources.job_recovery`` as the controller keeps it."""
    job = sky_jobs.parse_job(
        {"run": "true", "resources": {"job_recovery": job_recovery}}, "job", {}
    )
    return pool_api.job_recovery(job.job_recovery)


class StrategyExecutor:
    """SkyPilot's executor, as far as these tests reach: a job's recovery and its
    count of failures, carried from one decision to the next."""

    def __init__(
        self, max_restarts_on_errors: int = 0, recover_on_exit_codes: list[int] | None = None
    ) -> None:
        self.recovery = _recovery(
            {
                "max_restarts_on_errors": max_restarts_on_errors,
                "recover_on_exit_codes": recover_on_exit_codes,
            }
        )
        self.restart_cnt_on_failure = 0

    @property
    def max_restarts_on_errors(self) -> int:
        return self.recovery.max_restarts_on_errors

    @property
    def recover_on_exit_codes(self) -> list[int]:
        return sorted(self.recovery.recover_on_exit_codes)

    @property
    def strategy(self) -> str:
        return self.recovery.strategy

    @classmethod
    def make(cls, job_recovery: Any) -> StrategyExecutor:
        made = cls()
        made.recovery = _recovery(job_recovery)
        return made

    def should_restart_on_failure(self, exit_codes: Sequence[int] | None = None) -> bool:
        again, self.restart_cnt_on_failure = restart_on_failure(
            exit_codes, self.recovery, self.restart_cnt_on_failure
        )
        return again


class TestShouldRestartOnFailure:
    def test_restart_within_limit(self) -> None:
        executor = StrategyExecutor(max_restarts_on_errors=3)
        assert executor.should_restart_on_failure() is True
        assert executor.restart_cnt_on_failure == 1
        assert executor.should_restart_on_failure() is True
        assert executor.restart_cnt_on_failure == 2
        assert executor.should_restart_on_failure() is True
        assert executor.restart_cnt_on_failure == 3

    def test_restart_exceeds_limit(self) -> None:
        executor = StrategyExecutor(max_restarts_on_errors=2)
        assert executor.should_restart_on_failure() is True
        assert executor.should_restart_on_failure() is True
        assert executor.should_restart_on_failure() is False
        assert executor.restart_cnt_on_failure == 3

    def test_restart_zero_limit(self) -> None:
        executor = StrategyExecutor(max_restarts_on_errors=0)
        assert executor.should_restart_on_failure() is False
        assert executor.restart_cnt_on_failure == 1

    def test_exit_code_triggers_recovery(self) -> None:
        executor = StrategyExecutor(max_restarts_on_errors=0, recover_on_exit_codes=[42, 137])
        assert executor.should_restart_on_failure(exit_codes=[42]) is True
        assert executor.restart_cnt_on_failure == 0  # not incremented for an exit-code match

    def test_exit_code_match_multiple_codes(self) -> None:
        executor = StrategyExecutor(max_restarts_on_errors=0, recover_on_exit_codes=[1, 2, 137])
        assert executor.should_restart_on_failure(exit_codes=[0, 137]) is True
        assert executor.restart_cnt_on_failure == 0

    def test_exit_code_no_match_falls_back_to_counter(self) -> None:
        executor = StrategyExecutor(max_restarts_on_errors=1, recover_on_exit_codes=[42])
        assert executor.should_restart_on_failure(exit_codes=[1]) is True
        assert executor.restart_cnt_on_failure == 1
        assert executor.should_restart_on_failure(exit_codes=[1]) is False

    def test_empty_exit_codes_uses_counter(self) -> None:
        executor = StrategyExecutor(max_restarts_on_errors=1, recover_on_exit_codes=[42])
        assert executor.should_restart_on_failure(exit_codes=[]) is True
        assert executor.restart_cnt_on_failure == 1

    def test_none_exit_codes_uses_counter(self) -> None:
        executor = StrategyExecutor(max_restarts_on_errors=1, recover_on_exit_codes=[42])
        assert executor.should_restart_on_failure(exit_codes=None) is True
        assert executor.restart_cnt_on_failure == 1


class TestStrategyExecutorInit:
    def test_init_basic(self) -> None:
        executor = StrategyExecutor(max_restarts_on_errors=3, recover_on_exit_codes=[1, 2, 3])
        assert executor.max_restarts_on_errors == 3
        assert executor.recover_on_exit_codes == [1, 2, 3]
        assert executor.restart_cnt_on_failure == 0

    def test_init_empty_recover_on_exit_codes(self) -> None:
        executor = StrategyExecutor(max_restarts_on_errors=0, recover_on_exit_codes=None)
        assert executor.recover_on_exit_codes == []


class TestStrategyExecutorMake:
    def test_make_default_strategy(self) -> None:
        executor = StrategyExecutor.make({"strategy": "EAGER_NEXT_REGION"})
        assert executor.strategy == "EAGER_NEXT_REGION"

    def test_make_failover_strategy_string(self) -> None:
        assert StrategyExecutor.make("FAILOVER").strategy == "FAILOVER"

    def test_make_eager_next_region_strategy_string(self) -> None:
        assert StrategyExecutor.make("EAGER_NEXT_REGION").strategy == "EAGER_NEXT_REGION"

    def test_make_with_recovery_options(self) -> None:
        executor = StrategyExecutor.make(
            {
                "strategy": "FAILOVER",
                "max_restarts_on_errors": 5,
                "recover_on_exit_codes": [42, 137],
            }
        )
        assert executor.strategy == "FAILOVER"
        assert executor.max_restarts_on_errors == 5  # see the header
        assert executor.recover_on_exit_codes == [42, 137]
