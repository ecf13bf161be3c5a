"""A service call whose transaction PostgreSQL ended to break a deadlock is run again."""

from __future__ import annotations

import pytest
from psycopg.errors import DeadlockDetected

from services.deadlocks import ATTEMPTS, rerun_deadlocks


def calls_failing(times: int, error: type[Exception] = DeadlockDetected) -> tuple[list, object]:
    """A call that raises `error` its first `times` runs, then answers; and its runs."""
    runs: list[tuple] = []

    @rerun_deadlocks
    def call(*args, **kwargs):
        runs.append((args, kwargs))
        if len(runs) <= times:
            raise error("deadlock detected")
        return "done"

    return runs, call


def test_a_deadlocks_victim_is_run_again_with_the_same_arguments():
    runs, call = calls_failing(ATTEMPTS - 1)

    assert call(1, job="x") == "done"
    assert runs == [((1,), {"job": "x"})] * ATTEMPTS


def test_a_deadlock_that_keeps_coming_back_is_raised_after_the_last_attempt():
    runs, call = calls_failing(ATTEMPTS)

    with pytest.raises(DeadlockDetected):
        call()
    assert len(runs) == ATTEMPTS


def test_any_other_error_is_raised_at_once():
    runs, call = calls_failing(1, error=ValueError)

    with pytest.raises(ValueError):
        call()
    assert len(runs) == 1
