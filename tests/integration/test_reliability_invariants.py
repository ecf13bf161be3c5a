"""The reliability report's SQL invariants, run against real rows: each one can fail.

Some breaks are made impossible by the schema's own constraints; those tests drop the
constraint on their throwaway database first, to prove the query would still catch the row.
"""

from __future__ import annotations

import uuid

import pytest
from psycopg import sql

from bench.reliability import invariants
from repositories.tasks import BLOCKED


def make_job(db, status: str = "running", chunks: int = 1) -> uuid.UUID:
    """A csv_stats job row owned by a fresh user."""
    owner = db.execute(
        "INSERT INTO users (name, role) VALUES (%s, 'user') RETURNING id",
        (f"user-{uuid.uuid4().hex[:8]}",),
    ).fetchone()["id"]
    job_id = uuid.uuid4()
    db.execute(
        "INSERT INTO jobs (id, owner_id, workload, input_uri, status, chunks_total, trace_id) "
        "VALUES (%s, %s, 'csv_stats', 'archive:sha256:x', %s, %s, 't')",
        (job_id, owner, status, chunks),
    )
    return job_id


def make_task(db, job_id, index: int = 0, **columns) -> uuid.UUID:
    """A task row of the job; `columns` override status, attempt, lease and result columns."""
    task_id = uuid.uuid4()
    values = {
        "id": task_id,
        "job_id": job_id,
        "chunk_index": index,
        "workload": "csv_stats",
        "priority": 0,
        "input_uri": "archive:sha256:x",
        "input_sha256": "x",
        "max_attempts": 3,
        **columns,
    }
    insert = sql.SQL("INSERT INTO tasks ({}) VALUES ({})").format(
        sql.SQL(", ").join(map(sql.Identifier, values)),
        sql.SQL(", ").join(sql.Placeholder() * len(values)),
    )
    db.execute(insert, tuple(values.values()))
    return task_id


def completed(**extra) -> dict:
    """The columns of a completed task."""
    return {"status": "completed", "attempt": 1, "result_uri": "r", "result_sha256": "s", **extra}


def add_summary(db, task_id, job_id, index: int) -> None:
    """An accepted summary for the task, claiming to be chunk `index`."""
    db.execute(
        "INSERT INTO chunk_summaries (task_id, job_id, chunk_index, attempt, summary) "
        "VALUES (%s, %s, %s, 1, '{}')",
        (task_id, job_id, index),
    )


def test_a_consistent_database_breaks_no_invariant(db):
    job = make_job(db, status="succeeded")
    task = make_task(db, job, **completed())
    add_summary(db, task, job, 0)
    running = make_job(db)
    make_task(
        db, running, status="leased", attempt=1, lease_owner="w", lease_expires_at="2026-12-03Z"
    )

    assert invariants.violations(db) == {}


def test_two_accepted_summaries_of_one_chunk_are_reported(db):
    db.execute("ALTER TABLE chunk_summaries DROP CONSTRAINT chunk_summaries_job_chunk_key")
    job = make_job(db, chunks=2)
    add_summary(db, make_task(db, job, 0, **completed()), job, 0)
    add_summary(db, make_task(db, job, 1, **completed()), job, 0)

    found = invariants.violations(db)

    assert list(found) == ["one_summary_per_chunk"]
    assert found["one_summary_per_chunk"][0]["summaries"] == 2


def test_a_succeeded_job_with_a_pending_chunk_is_reported(db):
    job = make_job(db, status="succeeded", chunks=2)
    make_task(db, job, 0, **completed())
    make_task(db, job, 1)

    found = invariants.violations(db)

    assert list(found) == ["succeeded_job_has_finished_chunks"]
    assert found["succeeded_job_has_finished_chunks"][0]["status"] == "pending"


@pytest.mark.parametrize("attempt, claims", [(4, 0), (3, 4)], ids=["attempt", "claims"])
def test_a_task_past_its_attempt_budget_is_reported(db, attempt, claims):
    task = make_task(db, make_job(db), status="failed", attempt=attempt)
    for n in range(1, claims + 1):
        db.execute(
            "INSERT INTO task_attempts (id, task_id, attempt, worker_id, trace_id) "
            "VALUES (%s, %s, %s, 'w', 't')",
            (uuid.uuid4(), task, n),
        )

    assert list(invariants.violations(db)) == ["attempts_within_budget"]


@pytest.mark.parametrize("missing", ["lease_owner", "lease_expires_at"])
def test_a_leased_task_without_an_owner_or_expiry_is_reported(db, missing):
    db.execute("ALTER TABLE tasks DROP CONSTRAINT tasks_leased_has_lease")
    lease = {"lease_owner": "w", "lease_expires_at": "2026-12-03T00:00:00Z"}
    del lease[missing]
    make_task(db, make_job(db), status="leased", attempt=1, **lease)

    assert list(invariants.violations(db)) == ["leased_task_has_owner"]


def depend(db, job_id, *prerequisites) -> None:
    """Make the job depend on these."""
    db.execute("UPDATE jobs SET depends_on = %s WHERE id = %s", (list(prerequisites), job_id))


@pytest.mark.parametrize("ended", ["failed", "cancelled"])
def test_a_job_waiting_for_a_failed_or_cancelled_one_is_reported(db, ended):
    prerequisite = make_job(db, status=ended)
    waiting = make_job(db, status="queued")
    depend(db, waiting, prerequisite)

    found = invariants.violations(db)

    assert list(found) == ["no_job_waits_for_a_failed_one"]
    assert found["no_job_waits_for_a_failed_one"][0]["prerequisite"] == str(prerequisite)


def test_a_task_still_waiting_once_its_prerequisites_succeeded_is_reported(db):
    done, running = make_job(db, status="succeeded"), make_job(db)
    stuck, waiting = make_job(db, status="queued"), make_job(db, status="queued")
    depend(db, stuck, done)
    depend(db, waiting, done, running)
    for job in (stuck, waiting):
        make_task(db, job, not_before=BLOCKED)

    found = invariants.violations(db)

    assert list(found) == ["no_task_waits_for_good"]
    assert [row["job_id"] for row in found["no_task_waits_for_good"]] == [str(stuck)]


def test_a_tally_that_parts_from_its_count_is_reported(db):
    make_task(db, make_job(db))
    db.execute(
        "INSERT INTO tallies (figure, workload, status, n) "
        "VALUES ('tasks', 'csv_stats', 'pending', 2)"
    )

    found = invariants.violations(db)

    assert list(found) == ["tallies_equal_counts"]
    (row,) = found["tallies_equal_counts"]
    assert (row["figure"], row["status"], row["tallied"], row["counted"]) == (
        "tasks",
        "pending",
        3,
        1,
    )


def test_a_row_changed_without_its_tally_is_reported(db):
    job = make_job(db)
    db.execute("ALTER TABLE jobs DISABLE TRIGGER jobs_tally_status")
    db.execute("UPDATE jobs SET status = 'succeeded' WHERE id = %s", (job,))

    found = invariants.violations(db)["tallies_equal_counts"]

    assert sorted((r["status"], r["tallied"], r["counted"]) for r in found) == [
        ("running", 1, 0),
        ("succeeded", 0, 1),
    ]


def test_a_jobs_task_changed_without_its_tally_is_reported(db):
    job = make_job(db)
    make_task(db, job)
    db.execute("ALTER TABLE tasks DISABLE TRIGGER tasks_job_tally_updates")
    db.execute("UPDATE tasks SET status = 'cancelled' WHERE job_id = %s", (job,))

    found = invariants.violations(db)["job_tallies_equal_counts"]

    assert sorted((r["status"], r["tallied"], r["counted"]) for r in found) == [
        ("cancelled", 0, 1),
        ("pending", 1, 0),
    ]


def test_check_opens_its_own_connection(database_url, db):
    make_task(db, make_job(db, status="succeeded"))

    assert list(invariants.check(database_url)) == ["succeeded_job_has_finished_chunks"]
