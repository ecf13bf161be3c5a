"""Batches of results race cancels and failures of their job without deadlock or a lost state."""

from __future__ import annotations

import threading
import uuid

from services import jobs, maintenance, tasks
from services.jobs import JobSpec, TaskSpec
from services.workloads import TaskFailure, TaskResult
from tests.integration.manifests import CREDENTIAL, sha256_of

WORKERS = 4
PER_WORKER = 10
ROUNDS = 5


def echo_job(rt, user) -> jobs.JobView:
    """A job with a chunk per worker slot."""
    spec = JobSpec(
        workload="echo",
        input_uri="s3://in/",
        parameters={},
        tasks=[
            TaskSpec(input_uri=f"s3://in/{n}", input_sha256=sha256_of(str(n)), parameters={})
            for n in range(WORKERS * PER_WORKER)
        ],
    )
    return jobs.create_job(rt, user, spec, trace_id=uuid.uuid4().hex)


def batch_of(claimed) -> list[tasks.Completion]:
    return [
        tasks.Completion(
            c.task.id, c.task.attempt, c.lease_token, TaskResult("s3://out", sha256_of("out"), {})
        )
        for c in claimed
    ]


def race(*calls) -> list[BaseException]:
    """Start every call at once; return what they raised."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(calls))

    def run(call):
        start.wait()
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - the test reports every one
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return errors


def test_a_cancel_racing_batches_of_results_ends_cancelled_or_succeeded_without_deadlock(
    rt, user, db
):
    for _ in range(ROUNDS):
        view = echo_job(rt, user)
        claimed = {
            f"w{n}": tasks.claim_tasks(rt, f"w{n}", ["echo"], PER_WORKER, credential_id=CREDENTIAL)
            for n in range(WORKERS)
        }
        calls = [
            (lambda w=w, c=c: tasks.complete_tasks(rt, w, CREDENTIAL, batch_of(c)))
            for w, c in claimed.items()
        ]
        errors = race(*calls, lambda v=view: jobs.cancel_job(rt, user, v.job.id, trace_id="t"))
        assert [e for e in errors if not isinstance(e, jobs.Conflict)] == []
        job = db.execute("SELECT * FROM jobs WHERE id = %s", (view.job.id,)).fetchone()
        left = db.execute(
            "SELECT count(*) AS n FROM tasks WHERE job_id = %s AND status IN ('pending', 'leased')",
            (view.job.id,),
        ).fetchone()["n"]
        assert job["status"] in ("cancelled", "succeeded")
        assert left == 0
        if job["status"] == "succeeded":
            assert job["chunks_completed"] == job["chunks_total"]


def test_a_failure_racing_batches_of_results_fails_the_job_without_deadlock(rt, user, db):
    for _ in range(ROUNDS):
        view = echo_job(rt, user)
        claimed = {
            f"w{n}": tasks.claim_tasks(rt, f"w{n}", ["echo"], PER_WORKER, credential_id=CREDENTIAL)
            for n in range(WORKERS)
        }
        doomed = claimed["w0"].pop()
        broken = TaskFailure("boom", "it broke", retryable=False, details={})
        calls = [
            (lambda w=w, c=c: tasks.complete_tasks(rt, w, CREDENTIAL, batch_of(c)))
            for w, c in claimed.items()
        ]
        lease = ("w0", CREDENTIAL, 1, doomed.lease_token)
        failing = lambda d=doomed, b=broken, w=lease: tasks.fail_task(rt, d.task.id, *w, b)  # noqa: E731
        assert race(*calls, failing) == []
        job = db.execute("SELECT * FROM jobs WHERE id = %s", (view.job.id,)).fetchone()
        assert job["status"] == "failed"
        rows = db.execute(
            "SELECT status, count(*) AS n FROM tasks WHERE job_id = %s GROUP BY status",
            (view.job.id,),
        ).fetchall()
        counts = {r["status"]: r["n"] for r in rows}
        # Every other task either completed in its batch or was cancelled with the job.
        assert counts.get("failed") == 1
        assert counts.get("pending", 0) == counts.get("leased", 0) == 0
        assert job["chunks_completed"] == counts.get("completed", 0)


# --- lock order, interleaved on purpose ------------------------------------------------------


def waiting_on_locks(db) -> int:
    """How many sessions of this database wait for a lock right now."""
    return db.execute(
        "SELECT count(*) AS n FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    ).fetchone()["n"]


def in_background(call) -> tuple[threading.Thread, list]:
    """Run a call in a thread; the list gets what it returned or raised."""
    outcome: list = []

    def run():
        try:
            outcome.append(call())
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def wait_for_waiters(db, eventually, n: int) -> None:
    assert eventually(10, lambda: waiting_on_locks(db) >= n), f"{n} sessions never waited"


def three_task_job(rt, user) -> jobs.JobView:
    """A job of three echo tasks."""
    spec = JobSpec(
        workload="echo",
        input_uri="s3://in/",
        parameters={},
        tasks=[TaskSpec(f"s3://in/{n}", sha256_of(str(n)), {}) for n in range(3)],
    )
    return jobs.create_job(rt, user, spec, trace_id=uuid.uuid4().hex)


def three_tasks_out_of_id_order(rt, user) -> tuple[jobs.JobView, dict]:
    """A job of three tasks, all leased to w1, whose last chunk has the lowest id: batches
    (by id) and a cancel (once by chunk) would lock chunks 0 and 2 in opposite orders."""
    for _ in range(50):
        view = three_task_job(rt, user)
        ids = [jobs.task_id(view.job.id, n) for n in range(3)]
        if ids[2] < min(ids[0], ids[1]):
            claimed = {
                c.task.chunk_index: c
                for c in tasks.claim_tasks(rt, "w1", ["echo"], 3, credential_id=CREDENTIAL)
            }
            return view, claimed
        jobs.cancel_job(rt, user, view.job.id, trace_id="t")
    raise AssertionError("no job with its tasks in that order")


def test_a_cancel_and_a_batch_of_results_lock_tasks_in_one_order(rt, user, db, eventually):
    view, claimed = three_tasks_out_of_id_order(rt, user)
    with rt.pool.connection() as holder, holder.transaction():
        # As a heartbeat batch of another call does: chunk 1 held for a moment.
        holder.execute("SELECT 1 FROM tasks WHERE id = %s FOR UPDATE", (claimed[1].task.id,))
        cancel, cancelled = in_background(
            lambda: jobs.cancel_job(rt, user, view.job.id, trace_id="t")
        )
        wait_for_waiters(db, eventually, 1)
        batch, answered = in_background(
            lambda: tasks.complete_tasks(rt, "w1", CREDENTIAL, batch_of([claimed[2], claimed[0]]))
        )
        wait_for_waiters(db, eventually, 2)
    cancel.join(30)
    batch.join(30)

    assert not isinstance(cancelled[0], BaseException), cancelled
    assert not isinstance(answered[0], BaseException), answered
    assert cancelled[0].job.status == "cancelled"


def test_a_failure_and_a_cancel_lock_the_task_before_the_job(rt, user, db, eventually):
    view, claimed = three_tasks_out_of_id_order(rt, user)
    broken = TaskFailure("boom", "it broke", retryable=False, details={})
    with rt.pool.connection() as holder, holder.transaction():
        # As a batch of results does while it counts: the job held for a moment.
        holder.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (view.job.id,))
        failure, failed = in_background(
            lambda: tasks.fail_task(
                rt, claimed[0].task.id, "w1", CREDENTIAL, 1, claimed[0].lease_token, broken
            )
        )
        wait_for_waiters(db, eventually, 1)
        cancel, cancelled = in_background(
            lambda: jobs.cancel_job(rt, user, view.job.id, trace_id="t")
        )
        wait_for_waiters(db, eventually, 2)
    failure.join(30)
    cancel.join(30)

    assert failed[0].status == "failed", failed
    # The failure went first: the cancel meets a failed job, which it may not cancel.
    assert isinstance(cancelled[0], jobs.Conflict), cancelled
    assert db.execute("SELECT status FROM jobs WHERE id = %s", (view.job.id,)).fetchone() == {
        "status": "failed"
    }


def test_a_task_held_while_its_job_failed_is_cancelled_by_a_later_pass_once_free(rt, user, db):
    view = three_task_job(rt, user)
    doomed, _ = tasks.claim_tasks(rt, "w1", ["echo"], 2, credential_id=CREDENTIAL)
    held = jobs.task_id(view.job.id, 2)
    broken = TaskFailure("boom", "it broke", retryable=False, details={})

    def state():
        return db.execute(
            "SELECT j.status AS job, j.stray_tasks, t.status AS task"
            " FROM jobs j JOIN tasks t ON t.job_id = j.id WHERE t.id = %s",
            (held,),
        ).fetchone()

    with rt.pool.connection() as holder, holder.transaction():
        # As a claim that locked the task but had no room to lease it does.
        holder.execute("SELECT 1 FROM tasks WHERE id = %s FOR UPDATE", (held,))
        tasks.fail_task(rt, doomed.task.id, "w1", CREDENTIAL, 1, doomed.lease_token, broken)
        assert state() == {"job": "failed", "stray_tasks": True, "task": "pending"}
        assert tasks.cancel_strays(rt) == 0  # still held: left for a later pass

    assert state() == {"job": "failed", "stray_tasks": True, "task": "pending"}
    maintenance.run_pass(rt)

    assert state() == {"job": "failed", "stray_tasks": False, "task": "cancelled"}
    assert tasks.claim_tasks(rt, "w2", ["echo"], 3, credential_id=CREDENTIAL) == []
