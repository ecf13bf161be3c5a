"""Worker-side use cases: claim, heartbeat, complete, fail; and the lease sweeper."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from uuid import UUID

from psycopg import Connection

from repositories import jobs as job_rows
from repositories import tasks as task_rows
from repositories import workers as worker_rows
from repositories.events import publish
from repositories.tasks import ClaimedTask, ExpiredLease, Task
from services import archive, csvjobs, logcontext
from services import jobs as job_rules
from services.errors import Conflict, InvalidInput, LeaseLost, NotFound
from services.runtime import Runtime

logger = logging.getLogger(__name__)

# Retry budgets per failure class, within each task's max_attempts.
READ_RETRY_BUDGET = 2  # input_unavailable: the worker could not read or verify its input
LOST_RETRY_BUDGET = 1  # lease_expired: the worker vanished without a word
# Claims take this transaction-level advisory lock so the lease caps hold across processes.
CLAIM_LOCK = 0x43484B57  # "CHKW"


@dataclass(frozen=True)
class TaskResult:
    """What a worker reports for a completed task."""

    result_uri: str | None = None
    result_sha256: str | None = None
    metrics: dict | None = None
    summary: dict | None = None


@dataclass(frozen=True)
class TaskFailure:
    """What a worker reports for a failed task."""

    error_code: str
    error_message: str
    retryable: bool
    details: dict


def claim_tasks(
    rt: Runtime, worker_id: str, workloads: list[str], capacity: int, wait_seconds: float = 0
) -> list[ClaimedTask]:
    """Lease up to `capacity` tasks, waiting up to `wait_seconds` for one to become claimable."""
    unknown = sorted(set(workloads) - set(rt.limits.allowed_workloads))
    if unknown:
        raise InvalidInput.field("workloads", f"unknown workloads: {', '.join(unknown)}")
    deadline = time.monotonic() + wait_seconds
    while True:
        # Read the generation before trying, so a NOTIFY that lands mid-claim is not lost.
        seen = rt.wakeups.generation()
        claimed = _claim_once(rt, worker_id, workloads, capacity)
        remaining = deadline - time.monotonic()
        if claimed or remaining <= 0:
            return claimed
        # Re-check at least every second: a lost notification costs at most that.
        rt.wakeups.wait(seen, timeout=min(1.0, remaining))


def _claim_once(
    rt: Runtime, worker_id: str, workloads: list[str], capacity: int
) -> list[ClaimedTask]:
    with rt.pool.connection() as conn:
        conn.execute("SELECT pg_advisory_xact_lock(%(key)s)", {"key": CLAIM_LOCK})
        _expire(conn, now=None)
        worker_rows.touch(conn, worker_id, capacity=capacity, workloads=workloads)
        claimed = task_rows.claim(
            conn,
            worker_id=worker_id,
            workloads=workloads,
            capacity=capacity,
            max_per_worker=rt.limits.max_leases_per_worker,
            max_total=rt.limits.max_leases_total,
            lease_seconds=rt.limits.lease_seconds,
        )
        if claimed:
            job_rows.mark_running(conn, sorted({c.task.job_id for c in claimed}))
    for c in claimed:
        logger.info(
            "task leased",
            extra={
                "event": "task_leased",
                "job_id": str(c.task.job_id),
                "task_id": str(c.task.id),
                "attempt": c.task.attempt,
                "attempt_id": str(c.attempt_id),
                "worker_id": worker_id,
                "attempt_trace_id": c.trace_id,
            },
        )
    return claimed


def renew_lease(
    rt: Runtime, task_id: UUID, worker_id: str, attempt: int, checkpoint: dict | None = None
) -> datetime:
    """Extend the caller's lease, storing the checkpoint it carries."""
    with rt.pool.connection() as conn:
        expires = task_rows.renew(
            conn, task_id, worker_id, attempt, rt.limits.lease_seconds, checkpoint
        )
        if expires is None:
            raise _lease_error(conn, task_id, worker_id, attempt)
        worker_rows.touch(conn, worker_id)
    return expires


def complete_task(
    rt: Runtime, task_id: UUID, worker_id: str, attempt: int, result: TaskResult
) -> Task:
    """Accept the current attempt's result exactly once; a replay of it returns the stored task."""
    merge_job = None
    with rt.pool.connection() as conn:
        task = _task_or_404(conn, task_id)
        # Completions of one job are serialised on the job row, so exactly one of them
        # sees "every chunk completed" and moves the job on.
        job = job_rows.get(conn, task.job_id, for_update=True)
        uri, sha = result.result_uri, result.result_sha256
        if task.workload == "csv_stats":
            uri, sha = csvjobs.check_summary(task, result.summary)
        elif not uri or not sha:
            raise InvalidInput(
                "result_uri and result_sha256 are required",
                details={
                    "fields": {
                        name: ["required"]
                        for name, v in (("result_uri", uri), ("result_sha256", sha))
                        if not v
                    }
                },
            )
        done = task_rows.complete(conn, task_id, worker_id, attempt, uri, sha, result.metrics or {})
        if done is None:
            return _replayed_result(conn, task_id, worker_id, attempt, sha)
        closed = task_rows.finish_attempt(conn, task_id, attempt, "completed")
        _bind_attempt(done, worker_id, closed)
        if task.workload == "csv_stats":
            csvjobs.accept_summary(conn, done, result.summary)
        worker_rows.record_task_done(conn, worker_id, (result.metrics or {}).get("peak_rss_bytes"))
        publish(
            conn,
            job_id=job.id,
            owner_id=job.owner_id,
            event="chunk.completed",
            payload={"task_id": str(task_id), "chunk_index": done.chunk_index, "attempt": attempt},
            trace_id=job.trace_id,
        )
        # A freed lease slot may let a waiting worker claim more.
        task_rows.notify_claimable(conn)
        settled = job_rules.settle(conn, job)
        merge_job = settled.id if settled.status == "merging" else None
    rt.wakeups.wake()
    logger.info("task completed", extra={"event": "task_completed"})
    if merge_job is not None:
        csvjobs.merge_job(rt, merge_job)
    return done


def fail_task(
    rt: Runtime, task_id: UUID, worker_id: str, attempt: int, failure: TaskFailure
) -> Task:
    """Record the caller's failure; the task is retried while its budgets allow."""
    merge_job = None
    with rt.pool.connection() as conn:
        task = _task_or_404(conn, task_id)
        job = job_rows.get(conn, task.job_id, for_update=True)
        if task.workload == "csv_stats" and failure.error_code == "invalid_input":
            csvjobs.check_failure(task, failure.details)
        failed = task_rows.fail(
            conn,
            task_id,
            worker_id,
            attempt,
            error_code=failure.error_code,
            error_message=failure.error_message,
            error_details=failure.details,
            retryable=failure.retryable and failure.error_code != "invalid_input",
            read_budget=READ_RETRY_BUDGET,
        )
        if failed is None:
            raise _lease_error(conn, task_id, worker_id, attempt)
        outcome = "retried" if failed.status == "pending" else "failed"
        closed = task_rows.finish_attempt(
            conn, task_id, attempt, outcome, failure.error_code, failure.error_message
        )
        _bind_attempt(failed, worker_id, closed)
        task_rows.notify_claimable(conn)
        settled = job_rules.settle(conn, job)
        merge_job = settled.id if settled.status == "merging" else None
    rt.wakeups.wake()
    logger.info(
        "task failed",
        extra={"event": "task_failed", "error_code": failure.error_code, "outcome": outcome},
    )
    if merge_job is not None:
        csvjobs.merge_job(rt, merge_job)
    return failed


@dataclass(frozen=True)
class TaskInput:
    """Where the bytes of a task's input are: a byte range of an archived file."""

    path: Path
    offset: int
    length: int


def task_input(rt: Runtime, task_id: UUID, worker_id: str, attempt: int) -> TaskInput:
    """Locate a csv_stats chunk's bytes for the worker holding its current lease."""
    with rt.pool.connection() as conn:
        task = _task_or_404(conn, task_id)
        if task.status != "leased" or task.lease_owner != worker_id or task.attempt != attempt:
            raise _lease_error(conn, task_id, worker_id, attempt)
        job = job_rows.get(conn, task.job_id)
    if task.workload != "csv_stats":
        raise NotFound(f"task {task_id} has no input stored by the coordinator")
    p = task.parameters
    return TaskInput(
        archive.archive_path(rt.archive_dir, job.input_sha256),
        p["byte_start"],
        p["byte_end"] - p["byte_start"],
    )


def expire_leases(rt: Runtime, now: datetime | None = None) -> list[ExpiredLease]:
    """Take back every lease that has run out (the maintenance loop calls this)."""
    with rt.pool.connection() as conn:
        expired = _expire(conn, now=now)
    if expired:
        rt.wakeups.wake()
    return expired


def _expire(conn: Connection, now: datetime | None) -> list[ExpiredLease]:
    expired = task_rows.expire(conn, now=now, lost_budget=LOST_RETRY_BUDGET)
    for lease in expired:
        t = lease.task
        closed = task_rows.finish_attempt(
            conn, t.id, t.attempt, "lease_expired", "lease_expired", t.error_message
        )
        # The sweeper logs under the attempt's own trace id, so the expiry joins the
        # worker's and the coordinator's lines for that attempt.
        with logcontext.scope(
            job_id=str(t.job_id),
            task_id=str(t.id),
            attempt=t.attempt,
            worker_id=lease.worker_id,
            attempt_id=str(closed.id) if closed else None,
            trace_id=closed.trace_id if closed else None,
        ):
            logger.warning(
                "lease expired", extra={"event": "lease_expired", "next_status": t.status}
            )
    for job_id in sorted({lease.task.job_id for lease in expired if lease.task.status == "failed"}):
        job = job_rows.get(conn, job_id, for_update=True)
        job_rules.settle(conn, job)
    if expired:
        task_rows.notify_claimable(conn)
    return expired


def _bind_attempt(task: Task, worker_id: str, closed) -> None:
    """Put the attempt's ids on every log line that follows in this request (merge included)."""
    logcontext.bind(
        job_id=str(task.job_id),
        task_id=str(task.id),
        attempt=task.attempt,
        worker_id=worker_id,
        attempt_id=str(closed.id) if closed else None,
    )


def _task_or_404(conn: Connection, task_id: UUID) -> Task:
    task = task_rows.get(conn, task_id)
    if task is None:
        raise NotFound(f"task {task_id} does not exist")
    return task


def _lease_error(conn: Connection, task_id: UUID, worker_id: str, attempt: int) -> Exception:
    """Say why a fenced update matched nothing (the fence itself was the SQL)."""
    task = task_rows.get(conn, task_id)
    if task is None:
        return NotFound(f"task {task_id} does not exist")
    details = {
        "task_id": str(task_id),
        "attempt": attempt,
        "current_attempt": task.attempt,
        "status": task.status,
    }
    if task.status == "cancelled":
        return LeaseLost("the task's job was cancelled", code="task_cancelled", details=details)
    if task.attempt != attempt:
        return LeaseLost(
            f"attempt {attempt} is stale; the task is at attempt {task.attempt}",
            code="stale_attempt",
            details=details,
        )
    return LeaseLost(
        "this worker does not hold the task's current lease", code="lease_lost", details=details
    )


def _replayed_result(
    conn: Connection, task_id: UUID, worker_id: str, attempt: int, result_sha256: str
) -> Task:
    task = task_rows.get(conn, task_id)
    record = task_rows.find_attempt(conn, task_id, attempt)
    same_attempt = (
        task.status == "completed"
        and task.attempt == attempt
        and record is not None
        and record.worker_id == worker_id
    )
    if same_attempt and task.result_sha256 == result_sha256:
        return task
    if same_attempt:
        raise Conflict(
            "a different result was already accepted for this attempt",
            code="result_conflict",
            details={"task_id": str(task_id)},
        )
    raise _lease_error(conn, task_id, worker_id, attempt)
