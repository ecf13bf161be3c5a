"""The queue's figures come from tallies kept as the queue changes, and always equal its rows."""

from __future__ import annotations

import contextlib
import random
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from psycopg import sql

from repositories import jobs as job_rows
from repositories import queue as queue_rows
from services import jobs, maintenance, tasks
from services.errors import LeaseLost
from services.workloads import TaskFailure, TaskResult
from tests.integration.manifests import (
    CREDENTIAL,
    OTHER_WORKER,
    WORKER,
    batch_item,
    manifest,
    sha256_of,
)
from tests.integration.queue_counts import counted, tallied


def later() -> datetime:
    """A moment after every lease granted now has run out."""
    return datetime.now(UTC) + timedelta(minutes=5)


def failure(claimed: dict, code: str, retryable: bool) -> dict:
    """A failure report for a claimed task under its own attempt."""
    return {
        "worker_id": WORKER,
        "attempt": claimed["attempt"],
        "lease_token": claimed["lease_token"],
        "error_code": code,
        "error_message": "it broke",
        "retryable": retryable,
    }


def test_the_figures_equal_the_rows_through_every_change_a_task_or_a_job_goes_through(
    rt, submit, claim, complete, task_call, client, headers, db
):
    def figures_match() -> bool:
        return tallied(db) == counted(db)

    assert figures_match()
    done = submit(manifest(3))
    assert figures_match()  # admitted
    first, *rest = claim(WORKER, capacity=3)
    assert figures_match()  # leased, the job running
    complete(first)
    response = client.post(
        "/api/v1/tasks/results",
        json={"worker_id": WORKER, "results": [batch_item(t) for t in rest]},
        headers=headers["worker"],
    )
    assert response.status_code == 200
    assert figures_match()  # completed one by one and in a batch, the job succeeded

    flaky = submit(manifest(1, max_attempts=3))
    [leased] = claim(WORKER)
    task_call(leased["task_id"], "failure", failure(leased, "timeout", True))
    assert figures_match()  # back to pending with an error code
    [again] = claim(WORKER)
    assert again["attempt"] == 2
    assert tallied(db)["retries"] == {"timeout": 1}
    assert figures_match()  # the retry is counted once its next attempt opens
    task_call(again["task_id"], "failure", failure(again, "bad_format", False))
    assert tallied(db)["failed"] == {"bad_format": 1}
    assert figures_match()  # failed for good, and the job with it

    lost = submit(manifest(1, max_attempts=2))
    claim(OTHER_WORKER)
    tasks.expire_leases(rt, now=later())
    assert tallied(db)["expiries"] == 1
    assert figures_match()  # an expired lease
    [second] = claim(WORKER)
    assert tallied(db)["retries"] == {"timeout": 1, "lease_expired": 1}
    complete(second)
    assert figures_match()

    doomed = submit(manifest(2))
    claim(WORKER)
    assert client.post(f"/api/v1/jobs/{doomed['id']}/cancel", headers=headers["user"]).status_code
    assert figures_match()  # cancelled, a leased task and a pending one
    response = client.post(f"/api/v1/jobs/{flaky['id']}/retry", headers=headers["user"])
    assert response.status_code == 200, response.get_json()
    assert figures_match()  # a failed job re-queued

    queue_rows.fold_tallies(db)
    job_rows.fold_chunk_tallies(db)
    assert figures_match()
    labels = db.execute(
        "SELECT count(*) AS rows, count(DISTINCT (figure, workload, status, error_code)) AS labels"
        " FROM tallies"
    ).fetchone()
    assert labels["rows"] == labels["labels"]
    by_job = db.execute(
        "SELECT count(*) AS rows, count(DISTINCT (job_id, status)) AS labels FROM job_tallies"
    ).fetchone()
    assert by_job["rows"] == by_job["labels"]

    db.execute(
        "UPDATE jobs SET completed_at = now() - interval '8 days' WHERE id = ANY(%s)",
        ([done["id"], lost["id"]],),
    )
    kept_a_week = replace(rt, limits=replace(rt.limits, retention_days=7))
    assert jobs.delete_expired_history(kept_a_week) == 2
    assert tallied(db)["expiries"] == 0
    assert tallied(db)["retries"] == {"timeout": 1}
    assert figures_match()  # deleted with their tasks and attempts


def test_a_maintenance_pass_folds_the_tallies_into_one_row_per_label(rt, submit, claim, db):
    for _ in range(3):
        submit(manifest(2))
        claim(WORKER, capacity=2)
    before = tallied(db)
    assert db.execute("SELECT count(*) AS n FROM tallies").fetchone()["n"] > len(before["chunks"])

    maintenance.run_pass(rt)

    assert tallied(db) == before
    # Leased echo tasks and running jobs: one row each; and each job's leased tasks.
    assert db.execute("SELECT count(*) AS n FROM tallies").fetchone()["n"] == 2
    assert db.execute("SELECT count(*) AS n FROM job_tallies").fetchone()["n"] == 3


@pytest.mark.parametrize(
    ("fold", "table", "folded_rows"),
    [
        (queue_rows.fold_tallies, "tallies", 2),  # leased echo tasks, running jobs
        (job_rows.fold_chunk_tallies, "job_tallies", 4),  # each job's leased tasks
    ],
    ids=["queue", "jobs"],
)
def test_a_fold_takes_a_bounded_number_of_rows_and_the_next_one_goes_on(
    fold, table, folded_rows, submit, claim, db
):
    for _ in range(4):
        submit(manifest(2))
        claim(WORKER, capacity=2)
    before = tallied(db)
    count = sql.SQL("SELECT count(*) AS n FROM {}").format(sql.Identifier(table))
    rows = db.execute(count).fetchone()["n"]

    fold(db, limit=6)

    assert tallied(db) == before
    assert db.execute(count).fetchone()["n"] > rows - 6
    for _ in range(50):
        fold(db, limit=6)
    assert tallied(db) == before
    assert db.execute(count).fetchone()["n"] == folded_rows


def test_a_deleted_jobs_tallies_sum_to_nothing_and_fold_away(rt, submit, claim, complete, db):
    done = submit(manifest(3))
    for leased in claim(WORKER, capacity=3):
        complete(leased)
    kept = submit(manifest(2))
    db.execute(
        "UPDATE jobs SET completed_at = now() - interval '8 days' WHERE id = %s", (done["id"],)
    )

    assert jobs.delete_expired_history(replace(rt, limits=replace(rt.limits, retention_days=7)))
    job_rows.fold_chunk_tallies(db)

    assert tallied(db) == counted(db)
    left = db.execute("SELECT job_id, status, n FROM job_tallies").fetchall()
    assert [(str(r["job_id"]), r["status"], r["n"]) for r in left] == [(kept["id"], "pending", 2)]


def test_truncating_the_tables_by_hand_empties_their_figures(submit, claim, db):
    submit(manifest(2))
    claim(WORKER)

    db.execute("TRUNCATE jobs CASCADE")

    assert tallied(db) == counted(db)
    assert db.execute("SELECT count(*) AS n FROM tallies").fetchone()["n"] == 0
    assert db.execute("SELECT count(*) AS n FROM job_tallies").fetchone()["n"] == 0


def test_figures_stay_exact_while_workers_race_and_passes_fold(rt, submit, db):
    for _ in range(6):
        submit(manifest(20, max_attempts=2))
    stop = threading.Event()
    problems: list[str] = []

    def report(worker_id: str, claimed, fails: bool) -> None:
        task, lease = claimed.task, (worker_id, CREDENTIAL, claimed.task.attempt)
        if fails:
            failed = TaskFailure("timeout", "it broke", retryable=True, details={})
            tasks.fail_task(rt, task.id, *lease, claimed.lease_token, failed)
        else:
            uri = f"s3://out/{task.id}"
            result = TaskResult(uri, sha256_of(uri), {})
            tasks.complete_task(rt, task.id, *lease, claimed.lease_token, result)

    def work(worker_id: str, seed: int) -> None:
        chance = random.Random(seed)
        try:
            while claimed := tasks.claim_tasks(
                rt, worker_id, ["echo"], capacity=2, credential_id=CREDENTIAL
            ):
                for c in claimed:
                    # A task of a job that failed meanwhile was cancelled: lease lost.
                    with contextlib.suppress(LeaseLost):
                        report(worker_id, c, chance.random() < 0.3)
        except Exception as exc:  # any failure in a worker thread is a finding
            problems.append(f"{worker_id}: {exc!r}")

    def fold() -> None:
        while not stop.is_set():
            with rt.pool.connection() as conn:
                queue_rows.fold_tallies(conn)
                job_rows.fold_chunk_tallies(conn)

    folder = threading.Thread(target=fold)
    folder.start()
    workers = [threading.Thread(target=work, args=(f"w{n}", n)) for n in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    stop.set()
    folder.join(timeout=30)

    assert problems == []
    figures = tallied(db)
    assert figures == counted(db)
    assert figures["retries"]  # some tasks did fail and run again
    assert {state for _, state, _ in figures["chunks"]} <= {"completed", "failed", "cancelled"}
