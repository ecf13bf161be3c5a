"""A failed maintenance pass is logged by its cause: one warning for a blip, an error otherwise.

The database error is real: the pool points at a port nothing listens on, so the real
run_pass meets psycopg_pool.PoolTimeout, as it does while PostgreSQL restarts.
"""

from __future__ import annotations

import logging

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from app import maintenance
from app.config import Settings
from app.maintenance import ESCALATE_AFTER, PassFailures, run_one_pass
from app.runtime import describe_coordinator, workloads_for
from services.archive import LocalArchive
from services.auth import KnownPrincipals
from services.runtime import Limits, Runtime
from services.wakeups import Wakeups

NOWHERE = "postgresql://postgres@127.0.0.1:1/nowhere"


@pytest.fixture
def unreachable_database(tmp_path):
    """A Runtime whose pool cannot reach any database and gives up after 0.2 s."""
    pool = ConnectionPool(NOWHERE, min_size=1, timeout=0.2, reconnect_timeout=1, open=True)
    yield Runtime(
        pool=pool,
        limits=Limits(),
        workloads=workloads_for(Limits()),
        wakeups=Wakeups(NOWHERE),
        principals=KnownPrincipals(0),
        archive_dir=tmp_path / "archive",
        temp_dir=tmp_path / "tmp",
        coordinator=describe_coordinator(
            Settings(NOWHERE, archive_dir=tmp_path / "archive", secret_key="k" * 32)
        ),
        archive=LocalArchive(tmp_path / "archive"),
    )
    pool.close()


def failure_lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == "maintenance_error"]


def test_a_database_blip_logs_one_warning_line_with_its_class_and_trace_id(
    unreachable_database, caplog
):
    with caplog.at_level(logging.INFO, logger="app.maintenance"):
        run_one_pass(unreachable_database, PassFailures())

    [line] = failure_lines(caplog)
    assert line.levelno == logging.WARNING
    assert line.error_class == "PoolTimeout"
    assert "PoolTimeout" in line.getMessage()
    assert len(line.trace_id) == 32
    assert line.exc_info is None  # no traceback for a blip


def test_the_warning_carries_the_trace_id_the_pass_ran_under(monkeypatch, caplog):
    seen = []

    def failing_pass(runtime, *, trace_id):
        seen.append(trace_id)
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(maintenance.maintenance, "run_pass", failing_pass)

    with caplog.at_level(logging.WARNING, logger="app.maintenance"):
        run_one_pass(object(), PassFailures())

    [line] = failure_lines(caplog)
    assert (line.levelno, line.error_class) == (logging.WARNING, "OperationalError")
    assert seen == [line.trace_id]


def test_a_pass_that_keeps_failing_escalates_to_one_error_with_the_traceback(caplog):
    failures = PassFailures()
    down = psycopg.OperationalError("connection refused")

    with caplog.at_level(logging.WARNING, logger="app.maintenance"):
        for _ in range(2 * ESCALATE_AFTER):
            failures.failed(down, "f" * 32)

    levels = [r.levelno for r in failure_lines(caplog)]
    errors = [n for n, level in enumerate(levels, 1) if level == logging.ERROR]
    assert errors == [ESCALATE_AFTER, 2 * ESCALATE_AFTER]
    escalated = failure_lines(caplog)[ESCALATE_AFTER - 1]
    assert escalated.exc_info is not None and escalated.consecutive_failures == ESCALATE_AFTER


def test_a_pass_that_succeeds_ends_the_run_of_failures(caplog):
    failures = PassFailures()
    down = psycopg.OperationalError("connection refused")

    with caplog.at_level(logging.INFO, logger="app.maintenance"):
        for _ in range(ESCALATE_AFTER - 1):
            failures.failed(down, "f" * 32)
        failures.succeeded()
        failures.failed(down, "f" * 32)

    assert [r.levelno for r in failure_lines(caplog)] == [logging.WARNING] * ESCALATE_AFTER
    [recovered] = [r for r in caplog.records if r.event == "maintenance_recovered"]
    assert recovered.failed_passes == ESCALATE_AFTER - 1
    assert failures.consecutive == 1


def test_a_bug_is_an_error_with_its_traceback_on_the_first_pass(caplog):
    with caplog.at_level(logging.WARNING, logger="app.maintenance"):
        PassFailures().failed(KeyError("column_index"), "f" * 32)

    [line] = failure_lines(caplog)
    assert line.levelno == logging.ERROR and line.exc_info is not None
    assert line.error_class == "KeyError"
