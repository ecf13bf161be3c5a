"""The job state machine: move a locked job on after its tasks changed, or fail it; and tell
the jobs that depend on one that finished."""

from __future__ import annotations

import logging
from uuid import UUID

from psycopg import Connection

from repositories import events as event_rows
from repositories import jobs as job_rows
from repositories import locks
from repositories import tasks as task_rows
from repositories.jobs import Job
from repositories.tasks import Task
from services import dependencies
from services.workloads import Workload

logger = logging.getLogger(__name__)


def settle(conn: Connection, job: Job, rules: Workload) -> Job:
    """Move a locked job on after its tasks changed: running, merging, succeeded or failed."""
    if job.status not in ("queued", "running"):
        return job
    # One aggregate read on the common path; the task list only when something failed.
    counts = job_rows.chunk_counts(conn, [job.id])[job.id]
    if counts.failed:
        return _settle_failure(conn, job, rules)
    if counts.completed == job.chunks_total:
        return _finish(conn, job, rules)
    if job.status == "queued" and (counts.leased or counts.completed):
        return job_rows.set_status(conn, job.id, "running")
    return job


def settle_completions(conn: Connection, job: Job, rules: Workload) -> Job:
    """Move a locked job on after some of its tasks completed (its counter counts them).

    Without a merge step a failed task fails its job at once, so a job still queued or
    running has none, and the counter alone says whether this was the last chunk.
    """
    if rules.merged or job.status not in ("queued", "running"):
        return settle(conn, job, rules)
    if job.chunks_completed == job.chunks_total:
        return _finish(conn, job, rules)
    if job.status == "queued":
        return job_rows.set_status(conn, job.id, "running")
    return job


def _finish(conn: Connection, job: Job, rules: Workload) -> Job:
    """Every chunk is in: merge next, or succeed now."""
    if rules.merged:
        return job_rows.set_status(conn, job.id, "merging")
    job = job_rows.set_status(conn, job.id, "succeeded")
    event_rows.publish(
        conn,
        job_id=job.id,
        owner_id=job.owner_id,
        event="job.succeeded",
        payload={},
        trace_id=job.trace_id,
    )
    settle_dependents(conn, job)
    return job


def _settle_failure(conn: Connection, job: Job, rules: Workload) -> Job:
    tasks = task_rows.list_for_job(conn, job.id)
    failed = [t for t in tasks if t.status == "failed"]
    # With a merge step, bad input only decides the outcome once every chunk before it is
    # in: the sequential answer may be an overflow earlier in the file, or an earlier bad row.
    bad_input = min(
        (t for t in failed if rules.merged and t.error_code == "invalid_input"),
        key=lambda t: t.chunk_index,
        default=None,
    )
    horizon = bad_input.chunk_index if bad_input else len(tasks)
    hard = [t for t in failed if t is not bad_input and t.chunk_index < horizon]
    if hard:
        return fail_for_task(conn, job, hard[0], rules)
    task_rows.cancel_unfinished(conn, [job.id], after_index=bad_input.chunk_index, skip_locked=True)
    if all(t.status == "completed" for t in tasks if t.chunk_index < horizon):
        return job_rows.set_status(conn, job.id, "merging")
    if job.status == "queued":
        return job_rows.set_status(conn, job.id, "running")
    return job


def fail_for_task(conn: Connection, job: Job, cause: Task, rules: Workload) -> Job:
    """Fail a locked job because one of its tasks failed for good."""
    code = "invalid_input" if cause.error_code == "invalid_input" else "attempts_exhausted"
    details = {
        "chunk_index": cause.chunk_index,
        "task_id": str(cause.id),
        "error_code": cause.error_code,
        **(cause.error_details or {}),
    }
    details.pop("summary", None)
    error = {
        "code": code,
        "message": f"chunk {cause.chunk_index} failed: {cause.error_message}",
        "details": details,
    }
    return fail_with_error(conn, job, error, rules)


def fail_with_error(conn: Connection, job: Job, error: dict, rules: Workload) -> Job:
    """Fail a locked job with this error, cancelling what is left and keeping a partial result;
    and the jobs that depend on it."""
    job = _fail(conn, job, error, rules.partial_result(conn, job))
    settle_dependents(conn, job)
    return job


def _fail(conn: Connection, job: Job, error: dict, partial: dict | None) -> Job:
    # Tasks a batch of results is completing now are left to complete (that batch waits for
    # this job's lock next, so waiting for them here would deadlock); a finished job only
    # keeps their results.
    task_rows.cancel_unfinished(conn, [job.id], skip_locked=True)
    job = job_rows.set_status(conn, job.id, "failed", error=error, partial_result=partial)
    _announce_failures(conn, [job])
    return job


def _announce_failures(conn: Connection, failed: list[Job]) -> None:
    """Tell each failed job's owner in the outbox, and the log."""
    event_rows.publish_many(
        conn,
        [
            {
                "job_id": job.id,
                "owner_id": job.owner_id,
                "event": "job.failed",
                "payload": {"error": job.error["code"]},
                "trace_id": job.trace_id,
            }
            for job in failed
        ],
    )
    for job in failed:
        logger.warning(
            "job failed",
            extra={"event": "job_failed", "job_id": str(job.id), "error_code": job.error["code"]},
        )


def settle_dependents(conn: Connection, job: Job) -> None:
    """Tell the jobs that depend on this one, which has just finished: release the tasks of
    those whose every prerequisite has now succeeded, or, if it did not succeed, fail them
    and theirs in turn.

    A success takes each dependent's turn first, in id order, as a retry of it takes it:
    whichever comes second sees what the first committed. The statuses of its other
    prerequisites are read after the turn, in a statement of its own, so two prerequisites
    succeeding at once cannot each see the other unfinished and leave it waiting for good.
    """
    if job.status != "succeeded":
        _fail_downstream(conn, job)
    elif dependents := take_release_turns(conn, [job.id]):
        task_rows.release_blocked(conn, dependents)


def take_release_turns(conn: Connection, job_ids: list[UUID]) -> list[UUID]:
    """Take at once the turns the successes of these (locked) jobs would take one by one.

    A transaction settling several jobs takes them in one statement, after the jobs' rows and
    before settling any: taken job by job, two batches of results finishing jobs with
    dependents in common could each hold a turn the other waits for, and a success settled
    after another job's failure would take a turn while holding the rows that failure locked.
    Returns the dependents.
    """
    dependents = job_rows.dependents(conn, job_ids)
    if dependents:
        locks.take_turns(conn, locks.DEPENDENTS, [str(i) for i in dependents])
    return dependents


def _fail_downstream(conn: Connection, job: Job) -> None:
    """Fail the unfinished jobs that depend on this failed or cancelled one, and theirs in
    turn, a few statements whatever the graph's size (a pipeline may be thousands of steps
    long, a fan-out thousands of jobs wide).

    Every job downstream is locked at once, in the order the jobs were created, as each of
    them is locked by whoever else changes it (its cancel, a retry, an admission waiting for
    it, another failure upstream): a generation at a time, two failures spreading through one
    graph by paths of different lengths could each hold a job the other waits for. Locked
    before they are decided on, so a retry or an admission racing this either went first and
    is seen, or waits and sees the failure. A job admitted since the graph was read depends
    on one failed here; it is the newest, so locking it last keeps the order.
    """
    failed = {job.id: job.status}
    locked: set[UUID] = set()
    reach = dependencies.downstream(conn, [job.id])
    while reach:
        errors = {}
        for dependent in job_rows.lock_many(conn, reach):  # prerequisites first
            cause = next((p for p in dependent.depends_on or [] if p in failed), None)
            if cause is not None and dependent.status in ("queued", "running"):
                errors[dependent.id] = _dependency_failed(cause, failed[cause])
                failed[dependent.id] = "failed"
        locked |= reach
        if not errors:
            return
        # Only manifest jobs depend on others, and they keep no partial result.
        task_rows.cancel_unfinished(conn, errors, skip_locked=True)
        _announce_failures(conn, job_rows.fail_many(conn, errors))
        reach = set(job_rows.dependents(conn, errors)) - locked


def _dependency_failed(cause: UUID, status: str) -> dict:
    ended = "was cancelled" if status == "cancelled" else "failed"
    return {
        "code": "dependency_failed",
        "message": f"job {cause}, which it depends on, {ended}",
        "details": {"job_id": str(cause), "status": status},
    }
