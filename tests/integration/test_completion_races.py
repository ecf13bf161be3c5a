"""Batches of results race cancels and failures of their job without deadlock or a lost state."""

from __future__ import annotations

import threading
import uuid

from services import jobs, tasks
from services.jobs import JobSpec, TaskSpec
from services.workloads import TaskFailure, TaskResult
from tests.integration.manifests import sha256_of

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
        tasks.Completion(c.task.id, c.task.attempt, TaskResult("s3://out", sha256_of("out"), {}))
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
            f"w{n}": tasks.claim_tasks(rt, f"w{n}", ["echo"], PER_WORKER) for n in range(WORKERS)
        }
        calls = [
            (lambda w=w, c=c: tasks.complete_tasks(rt, w, batch_of(c))) for w, c in claimed.items()
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
            f"w{n}": tasks.claim_tasks(rt, f"w{n}", ["echo"], PER_WORKER) for n in range(WORKERS)
        }
        doomed = claimed["w0"].pop()
        broken = TaskFailure("boom", "it broke", retryable=False, details={})
        calls = [
            (lambda w=w, c=c: tasks.complete_tasks(rt, w, batch_of(c))) for w, c in claimed.items()
        ]
        failing = lambda d=doomed, b=broken: tasks.fail_task(rt, d.task.id, "w0", 1, b)  # noqa: E731
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
