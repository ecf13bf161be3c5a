"""Statements that change thousands of tasks at once stay within the statement timeout on a
pooled connection, whatever small statements that connection ran before.

The triggers on tasks and task_attempts read their transition tables in PL/pgSQL, which keeps
each query's plan for the connection's life: a plan made for the one-row transition tables of
a heartbeat must not be a nested loop that a 10,000-row cancel then runs in quadratic time.
"""

from __future__ import annotations

import pytest

from repositories import tasks as task_rows
from tests.integration.manifests import manifest

LARGEST_JOB = 10_000
MOST_A_CLAIM = 1000


@pytest.fixture
def seasoned(db, submit, claim):
    """The test's connection, under the coordinator's 3 s statement timeout, after running the
    one-row updates of tasks and attempts a pooled connection runs all day (enough for PL/pgSQL
    to keep its plans)."""
    submit(manifest(1))
    [small] = claim("worker-small")
    db.execute("SET statement_timeout = '3s'")
    for _ in range(8):
        db.execute("UPDATE tasks SET version = version + 1 WHERE id = %s", (small["task_id"],))
        db.execute(
            "UPDATE task_attempts SET worker_id = worker_id WHERE task_id = %s",
            (small["task_id"],),
        )
    return db


def test_the_largest_job_is_cancelled_on_a_seasoned_connection(seasoned, submit):
    job = submit(manifest(LARGEST_JOB))

    assert task_rows.cancel_unfinished(seasoned, [job["id"]]) == LARGEST_JOB


def test_the_largest_job_with_every_task_leased_is_cancelled_on_a_seasoned_connection(
    seasoned, submit, claim
):
    job = submit(manifest(LARGEST_JOB))
    for n in range(LARGEST_JOB // MOST_A_CLAIM):
        claim(f"worker-{n}", capacity=MOST_A_CLAIM)

    assert task_rows.cancel_unfinished(seasoned, [job["id"]]) == LARGEST_JOB
    open_attempts = seasoned.execute(
        "SELECT count(*) AS n FROM task_attempts a JOIN tasks t ON t.id = a.task_id"
        " WHERE t.job_id = %s AND a.outcome IS NULL",
        (job["id"],),
    ).fetchone()["n"]
    assert open_attempts == 0
