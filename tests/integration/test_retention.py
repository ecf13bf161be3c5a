"""Finished jobs older than the retention period are deleted by the maintenance pass."""

from __future__ import annotations

from dataclasses import replace

import pytest

from repositories import jobs as job_rows
from services import jobs, maintenance, tasks
from services.runtime import Limits
from services.workloads import Workload
from tests.integration.manifests import WORKER, manifest


@pytest.fixture
def app_config(app_config):
    """Keep finished jobs for 7 days."""
    return {**app_config, "CHUNKWISE_RETENTION_DAYS": "7"}


def age(db, job_id: str, days: int) -> None:
    """Pretend the job finished `days` ago."""
    db.execute(
        "UPDATE jobs SET completed_at = now() - make_interval(days => %s) WHERE id = %s",
        (days, job_id),
    )


def test_a_pass_deletes_old_finished_jobs_with_their_tasks_and_events(
    rt, submit, claim, complete, db
):
    old = submit(manifest(1))
    complete(claim(WORKER)[0])
    age(db, old["id"], 8)
    maintenance.run_pass(rt)
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0
    assert db.execute("SELECT count(*) AS n FROM tasks").fetchone()["n"] == 0
    assert db.execute("SELECT count(*) AS n FROM outbox").fetchone()["n"] == 0


def test_recent_and_unfinished_jobs_are_kept(rt, submit, claim, complete, client, headers, db):
    recent = submit(manifest(1))
    complete(claim(WORKER)[0])
    age(db, recent["id"], 6)
    running = submit(manifest(1))
    db.execute(
        "UPDATE jobs SET created_at = now() - interval '30 days' WHERE id = %s", (running["id"],)
    )
    assert jobs.delete_expired_history(rt) == 0
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 2


def test_without_a_retention_period_nothing_is_deleted(rt, submit, claim, complete, db):
    job = submit(manifest(1))
    complete(claim(WORKER)[0])
    age(db, job["id"], 10_000)
    assert jobs.delete_expired_history(replace(rt, limits=Limits())) == 0
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 1


def test_a_pass_deletes_old_jobs_oldest_first_until_their_tasks_reach_its_budget(
    rt, submit, claim, complete, db
):
    finished = []
    for days in (30, 20, 10):  # oldest first; three tasks each
        job = submit(manifest(3))
        for task in claim(WORKER, capacity=3):
            complete(task)
        age(db, job["id"], days)
        finished.append(job["id"])

    with rt.pool.connection() as conn:
        # The first job always goes; the second starts within the budget; the third does not.
        assert job_rows.delete_finished(conn, older_than_days=7, task_budget=4) == 2
        kept = [r["id"] for r in conn.execute("SELECT id FROM jobs").fetchall()]
        assert [str(k) for k in kept] == [finished[2]]
        assert job_rows.delete_finished(conn, older_than_days=7, task_budget=1) == 1


def broken(*args: object) -> None:
    """A step that fails the way a bug does."""
    raise ZeroDivisionError


def test_a_job_whose_merge_fails_stops_none_of_the_other_steps(
    rt, submit, claim, complete, db, monkeypatch
):
    old = submit(manifest(1))
    complete(claim(WORKER)[0])
    age(db, old["id"], 8)
    submit(manifest(1))
    [lost] = claim(WORKER)
    db.execute(
        "UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
        (lost["task_id"],),
    )
    merging = submit(manifest(1))
    db.execute("UPDATE jobs SET status = 'merging' WHERE id = %s", (merging["id"],))
    monkeypatch.setattr(Workload, "merge", broken)

    with pytest.raises(ZeroDivisionError):
        maintenance.run_pass(rt)

    assert db.execute("SELECT id FROM jobs WHERE id = %s", (old["id"],)).fetchone() is None
    status = db.execute("SELECT status FROM tasks WHERE id = %s", (lost["task_id"],)).fetchone()
    assert status["status"] == "pending"


def test_a_lease_sweep_that_fails_does_not_stop_retention(
    rt, submit, claim, complete, db, monkeypatch
):
    old = submit(manifest(1))
    complete(claim(WORKER)[0])
    age(db, old["id"], 8)
    monkeypatch.setattr(tasks, "expire_leases", broken)

    with pytest.raises(ZeroDivisionError):
        maintenance.run_pass(rt)

    assert db.execute("SELECT id FROM jobs WHERE id = %s", (old["id"],)).fetchone() is None
