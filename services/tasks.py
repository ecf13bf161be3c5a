"""Worker-side use cases: claim; heartbeat, complete (and claim again); fail; the lease sweeper."""

from __future__ import annotations

import errno
import hmac
import io
import logging
import math
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime
from typing import BinaryIO
from uuid import UUID

import psycopg
from psycopg import Connection

from repositories import attempts as attempt_rows
from repositories import jobs as job_rows
from repositories import locks
from repositories import rate_limits as rate_rows
from repositories import task_values as value_rows
from repositories import tasks as task_rows
from repositories import workers as worker_rows
from repositories.tasks import ClaimedTask, ExpiredLease, Renewal, Task
from services import logcontext, settlement, task_values
from services.deadlocks import rerun_deadlocks
from services.errors import (
    ChunkwiseError,
    Conflict,
    Forbidden,
    LeaseLost,
    NotFound,
    RangeNotSatisfiable,
    WaitRefused,
)
from services.runtime import Limits, Runtime
from services.wakeups import RETRY_WAIT_SECONDS
from services.workloads import TaskFailure, TaskResult, Workload, Workloads

logger = logging.getLogger(__name__)

# Retry budgets per failure class, within each task's max_attempts.
READ_RETRY_BUDGET = 2  # input_unavailable: the worker could not read or verify its input
LOST_RETRY_BUDGET = 1  # lease_expired: the worker vanished without a word

READ_BLOCK = 1024 * 1024  # an input is served in blocks of this many bytes


@dataclass(frozen=True)
class Completion:
    """One result a worker reports, under the attempt and lease token it holds."""

    task_id: UUID
    attempt: int
    lease_token: str
    result: TaskResult


@dataclass(frozen=True)
class RenewalOutcome:
    """What became of one lease renewal: its new expiry, or the error that refused it."""

    task_id: UUID
    lease_expires_at: datetime | None = None
    error: ChunkwiseError | None = None


@dataclass(frozen=True)
class CompletionOutcome:
    """What became of one reported result: the task, or the error that refused it."""

    task_id: UUID
    task: Task | None = None
    replayed: bool = False
    error: ChunkwiseError | None = None


def claim_tasks(
    rt: Runtime,
    worker_id: str,
    workloads: list[str],
    capacity: int,
    wait_seconds: float = 0,
    *,
    credential_id: int,
) -> list[ClaimedTask]:
    """Lease up to `capacity` tasks, waiting up to `wait_seconds` for one to become claimable.

    Refused when the worker id is bound to another credential; WaitRefused when none is
    claimable and this process has no waiting place free.
    """
    rules = rt.workloads.require(workloads, "workloads")
    deadline = time.monotonic() + wait_seconds
    with rt.wakeups.waiting(wait_seconds > 0) as may_wait:
        while True:
            # Read the generation before trying, so a NOTIFY that lands mid-claim is not lost.
            seen = rt.wakeups.generation()
            claimed = _claim_once(rt, (worker_id, credential_id), rules, capacity)
            remaining = deadline - time.monotonic()
            if claimed or remaining <= 0:
                return claimed
            if not may_wait:
                raise WaitRefused(RETRY_WAIT_SECONDS)
            # Re-check at least every second: a lost notification costs at most that.
            rt.wakeups.wait(seen, timeout=min(1.0, remaining))


def _claim_once(
    rt: Runtime, worker: tuple[str, int], rules: list[Workload], capacity: int
) -> list[ClaimedTask]:
    # Workloads without lease caps or a rate are claimed together, in one priority order, by
    # one statement in a transaction of its own; each capped or rate-limited workload takes its
    # turn in a transaction of its own, so a claim holds one turn at a time and cannot deadlock.
    # Expired leases are the maintenance pass's (every CHUNKWISE_MAINTENANCE_SECONDS): a sweep
    # here would read every leased row on every claim.
    named = [r.name for r in rules]
    free = [r.name for r in rules if not r.caps.serialised]
    capped = sorted((r for r in rules if r.caps.serialised), key=lambda r: r.name)
    # The free claim is one statement on the autocommit connection: one round trip, its own
    # transaction (which it tells not to wait for the WAL flush, see task_rows.claim).
    claimed: list[ClaimedTask] = []
    with rt.pool.connection() as conn:
        if free:
            claimed += _lease(conn, rt, worker, named, free, capacity, None, None)
        for r in capped:
            if len(claimed) >= capacity:
                break
            claimed += _lease_in_turn(conn, rt, worker, named, r, capacity - len(claimed))
    # Per task, so skipped whole (dicts and all) when INFO is off, as under load it may be.
    for c in claimed if logger.isEnabledFor(logging.INFO) else ():
        logger.info(
            "task leased",
            extra={
                "event": "task_leased",
                "job_id": str(c.task.job_id),
                "task_id": str(c.task.id),
                "attempt": c.task.attempt,
                "attempt_id": str(c.attempt_id),
                "worker_id": worker[0],
                "attempt_trace_id": c.trace_id,
            },
        )
    return claimed


def _lease_in_turn(
    conn: Connection,
    rt: Runtime,
    worker: tuple[str, int],
    named: list[str],
    rules: Workload,
    room: int,
) -> list[ClaimedTask]:
    # In the workload's turn, so its lease caps and start tokens cannot be raced.
    caps = rules.caps
    limits = (caps.max_leases_per_worker, caps.max_leases_total)
    if caps.max_starts_per_second is None:
        # The turn and the claim go in one round trip, and the claim's commit ends the turn.
        return _lease(conn, rt, worker, named, [rules.name], room, *limits, turn=rules.name)
    with conn.transaction():
        locks.take_turn(conn, locks.CLAIM, rules.name)
        tokens = rate_rows.bucket(conn, rules.name, caps.max_starts_per_second, caps.start_burst)
        # With no token to spend the claim still runs: it records the worker as seen.
        leased = _lease(
            conn, rt, worker, named, [rules.name], min(room, math.floor(tokens.tokens)), *limits
        )
        if leased:
            rate_rows.spend(conn, rules.name, tokens, len(leased))
    return leased


def _lease(
    conn: Connection,
    rt: Runtime,
    worker: tuple[str, int],
    named: list[str],
    workloads: list[str],
    capacity: int,
    max_per_worker: int | None,
    max_total: int | None,
    turn: str | None = None,
) -> list[ClaimedTask]:
    worker_id, credential_id = worker
    claimed = task_rows.claim(
        conn,
        worker_id=worker_id,
        credential_id=credential_id,
        workloads=workloads,
        named=named,
        capacity=capacity,
        max_per_worker=max_per_worker,
        max_total=max_total,
        lease_seconds=rt.limits.lease_seconds,
        turn=turn,
    )
    if claimed is None:  # the statement failed, so it wrote nothing; raised in any turn's
        # transaction, so that is undone too
        raise _worker_id_taken(worker_id)
    return claimed


def renew_lease(
    rt: Runtime,
    task_id: UUID,
    worker_id: str,
    credential_id: int,
    attempt: int,
    lease_token: str,
    checkpoint: dict | None = None,
) -> datetime:
    """Extend the caller's lease, storing the checkpoint it carries."""
    renewal = Renewal(task_id, attempt, lease_token, checkpoint)
    (outcome,) = renew_leases(rt, worker_id, credential_id, [renewal])
    if outcome.error is not None:
        raise outcome.error
    return outcome.lease_expires_at


def renew_leases(
    rt: Runtime, worker_id: str, credential_id: int, renewals: list[Renewal]
) -> list[RenewalOutcome]:
    """Extend many of the caller's leases in one transaction, each fenced on its own; answer
    each in order (a lease no longer the caller's refuses only itself)."""
    with rt.pool.connection() as conn, conn.transaction():
        renewed = task_rows.renew_many(
            conn, worker_id, credential_id, renewals, rt.limits.lease_seconds
        )
        caller = (worker_id, credential_id)
        outcomes = [
            RenewalOutcome(r.task_id, lease_expires_at=renewed[r.task_id])
            if r.task_id in renewed
            else RenewalOutcome(
                r.task_id, error=_lease_error(conn, r.task_id, caller, r.attempt, r.lease_token)
            )
            for r in renewals
        ]
        if renewed:
            worker_rows.touch(conn, worker_id)
    return outcomes


def complete_task(
    rt: Runtime,
    task_id: UUID,
    worker_id: str,
    credential_id: int,
    attempt: int,
    lease_token: str,
    result: TaskResult,
) -> Task:
    """Accept the current attempt's result exactly once; a replay of it returns the stored task."""
    completion = Completion(task_id, attempt, lease_token, result)
    (outcome,) = complete_tasks(rt, worker_id, credential_id, [completion])
    if outcome.error is not None:
        raise outcome.error
    return outcome.task


@rerun_deadlocks
def complete_tasks(
    rt: Runtime, worker_id: str, credential_id: int, completions: list[Completion]
) -> list[CompletionOutcome]:
    """Accept many results in one transaction, each fenced on its own; answer each in order.

    A refused result (stale, foreign, invalid, unknown) refuses only itself. A job is locked
    late, by the counter its completions add to (only the worker's row comes after), so
    batches for one job take turns only for that and their commit, and exactly one of them
    sees "every chunk completed". A result refused before the fence (an invalid summary, say)
    is explained only to its lease's holder; anyone else hears that the lease is not theirs.
    """
    caller = (worker_id, credential_id)
    with rt.pool.connection() as conn, conn.transaction():
        tasks = task_rows.get_many(conn, [c.task_id for c in completions])
        checked = [_checked(rt, tasks, c) for c in completions]
        valid = [o for o in checked if isinstance(o, task_rows.Outcome)]
        completed = task_rows.complete_many(conn, worker_id, credential_id, valid) if valid else []
        done = {c.task.id: c.task for c in completed}
        outcomes = []
        for completion, check in zip(completions, checked, strict=True):
            if isinstance(check, NotFound):
                outcomes.append(CompletionOutcome(completion.task_id, error=check))
                continue
            if isinstance(check, ChunkwiseError):
                c = completion
                refusal = _foreign_caller(conn, c.task_id, caller, c.attempt, c.lease_token)
                outcomes.append(CompletionOutcome(c.task_id, error=refusal or check))
                continue
            task = done.get(completion.task_id)
            if task is not None and task.result_sha256 == check.result_sha256:
                # Accepted here; a repeat of it later in the batch is a replay.
                outcomes.append(CompletionOutcome(completion.task_id, done.pop(task.id)))
                continue
            try:
                replay = _replayed_result(conn, completion, caller, check.result_sha256)
                outcomes.append(CompletionOutcome(completion.task_id, replay, replayed=True))
            except ChunkwiseError as exc:
                outcomes.append(CompletionOutcome(completion.task_id, error=exc))
        accepted = [
            (o, c)
            for o, c in zip(outcomes, completions, strict=True)
            if o.task is not None and not o.replayed
        ]
        stored = [
            value_rows.StoredValue(o.task_id, check.value)
            for o, check in zip(outcomes, checked, strict=True)
            if o.task is not None and not o.replayed and check.value is not None
        ]
        if stored:
            value_rows.store(conn, stored)
        closed = {c.task.id: c for c in completed}
        merging = _record_completions(conn, rt, worker_id, accepted, closed) if accepted else []
    for job_id, rules in merging:
        rules.merge(rt.pool, job_id)
    return outcomes


@dataclass(frozen=True)
class CompletedAndClaimed:
    """A batch's outcomes and the tasks then leased, or the error that refused the claim."""

    outcomes: list[CompletionOutcome]
    claimed: list[ClaimedTask]
    claim_error: ChunkwiseError | None = None


def complete_and_claim(
    rt: Runtime,
    worker_id: str,
    credential_id: int,
    completions: list[Completion],
    workloads: list[str],
    capacity: int,
) -> CompletedAndClaimed:
    """Accept results as complete_tasks does, then lease up to `capacity` as a claim, no wait."""
    # The results' transaction commits first: they stay recorded whatever becomes of the claim.
    # Checked first, so an unknown workload refuses the whole call before anything is written.
    rules = rt.workloads.require(workloads, "workloads")
    outcomes = complete_tasks(rt, worker_id, credential_id, completions)
    try:
        claimed = _claim_once(rt, (worker_id, credential_id), rules, capacity)
    except Forbidden as refusal:  # the worker id is another credential's
        return CompletedAndClaimed(outcomes, [], refusal)
    return CompletedAndClaimed(outcomes, claimed)


def _checked(
    rt: Runtime, tasks: dict[UUID, Task], completion: Completion
) -> task_rows.Outcome | ChunkwiseError:
    """The outcome to write for a result, or the error that refuses it before any write."""
    task = tasks.get(completion.task_id)
    if task is None:
        return NotFound(f"task {completion.task_id} does not exist")
    result, value = completion.result, None
    try:
        if result.value is not None:
            value = task_values.result_value(result.value, rt.limits.max_result_bytes)
            where = task_values.result_uri(task.id)
            result = replace(result, result_uri=where, result_sha256=value.sha256)
        uri, sha = rt.workloads.of(task.workload).check_result(task, result)
    except ChunkwiseError as exc:
        return exc
    metrics = result.metrics or {}
    c, text = completion, None if value is None else value.text
    return task_rows.Outcome(c.task_id, c.attempt, c.lease_token, uri, sha, metrics, text)


def _record_completions(
    conn: Connection,
    rt: Runtime,
    worker_id: str,
    accepted: list[tuple[CompletionOutcome, Completion]],
    closed: dict[UUID, task_rows.Completed],
) -> list[tuple[UUID, Workload]]:
    """Keep what each workload keeps, log, count, settle the jobs (the completion itself closed
    the attempts and published the events)."""
    done = [outcome.task for outcome, _ in accepted]
    for task, (_, completion) in zip(done, accepted, strict=True):
        rt.workloads.of(task.workload).accept_result(conn, task, completion.result)
    for t in done if logger.isEnabledFor(logging.INFO) else ():
        attempt = closed[t.id]
        # Under the attempt's own trace id, whichever attempt's trace named the batch call.
        trace = {"trace_id": attempt.attempt_trace_id} if attempt.attempt_trace_id else {}
        with logcontext.scope(**_attempt_fields(t, worker_id, attempt.attempt_id), **trace):
            logger.info("task completed", extra={"event": "task_completed"})
    if len(done) == 1:
        # One result per request: the rest of the request (its merge) logs as this attempt.
        logcontext.bind(**_attempt_fields(done[0], worker_id, closed[done[0].id].attempt_id))
    counted = [
        job_rows.count_completed(conn, job_id, count)
        for job_id, count in sorted(Counter(t.job_id for t in done).items())
    ]
    complete = [j.id for j in counted if j.chunks_completed == j.chunks_total]
    if complete and len(counted) > 1:
        settlement.take_release_turns(conn, complete)
    merging = []
    for job in counted:
        rules = rt.workloads.of(job.workload)
        if settlement.settle_completions(conn, job, rules).status == "merging":
            merging.append((job.id, rules))
    # The worker's row last: a claim by the same worker may wait for it (see task_rows.claim)
    # but never for a job, so neither can wait on the other.
    peak = max((t.metrics or {}).get("peak_rss_bytes") or 0 for t in done) or None
    worker_rows.record_tasks_done(conn, worker_id, len(done), peak)
    return merging


def retry_delay(limits: Limits, attempt: int, asked: float | None = None) -> float:
    """Seconds before a task whose attempt `attempt` failed may be claimed again: what the
    worker asked for, else exponential backoff with jitter (half to all of the step)."""
    if asked is not None:
        return asked
    step = min(limits.retry_delay_max_seconds, limits.retry_delay_seconds * 2 ** (attempt - 1))
    return step * random.uniform(0.5, 1.0)  # noqa: S311 - spreading retries, not a secret


@rerun_deadlocks
def fail_task(
    rt: Runtime,
    task_id: UUID,
    worker_id: str,
    credential_id: int,
    attempt: int,
    lease_token: str,
    failure: TaskFailure,
) -> Task:
    """Record the caller's failure; the task is retried while its budgets allow."""
    caller = (worker_id, credential_id)
    with rt.pool.connection() as conn, conn.transaction():
        task = _task_or_404(conn, task_id)
        rules = rt.workloads.of(task.workload)
        if failure.error_code == "invalid_input":
            try:
                rules.check_failure(task, failure)
            except ChunkwiseError:  # explained only to the lease's holder
                foreign = _foreign_caller(conn, task_id, caller, attempt, lease_token)
                if foreign is not None:
                    raise foreign from None
                raise
        # The task before its job, the order a cancel and a batch of results take them in:
        # the other way round a cancel and this failure could each wait for the other.
        failed = task_rows.fail(
            conn,
            task_id,
            worker_id,
            credential_id,
            attempt,
            lease_token,
            error_code=failure.error_code,
            error_message=failure.error_message,
            error_details=failure.details,
            retryable=failure.retryable and failure.error_code != "invalid_input",
            read_budget=READ_RETRY_BUDGET,
            retry_delay=retry_delay(rt.limits, attempt, failure.retry_after_seconds),
        )
        if failed is None:
            raise _lease_error(conn, task_id, caller, attempt, lease_token)
        outcome = "retried" if failed.status == "pending" else "failed"
        closed = attempt_rows.finish(
            conn, task_id, attempt, outcome, failure.error_code, failure.error_message
        )
        logcontext.bind(**_attempt_fields(failed, worker_id, closed.id if closed else None))
        job = job_rows.get(conn, task.job_id, for_update=True)
        settled = settlement.settle(conn, job, rules)
    logger.info(
        "task failed",
        extra={"event": "task_failed", "error_code": failure.error_code, "outcome": outcome},
    )
    if settled.status == "merging":
        rules.merge(rt.pool, settled.id)
    return failed


@dataclass(frozen=True)
class InputStream:
    """A task's input as its worker is served it: `length` bytes from `first` of `total`."""

    first: int
    length: int
    total: int
    file: InputFile


@dataclass(frozen=True)
class LeaseCall:
    """Who calls under which lease: the worker id, its credential, the attempt and its token."""

    worker_id: str
    credential_id: int
    attempt: int
    lease_token: str


def serve_input(
    rt: Runtime,
    task_id: UUID,
    call: LeaseCall,
    byte_range: tuple[int, int | None] | None = None,
) -> InputStream:
    """Stream a task's input bytes, or the (first, last) range asked for, to the worker holding
    its current lease.

    The archive is opened before any byte is served: a coordinator that cannot read the input
    answers ArchiveUnavailable (a 503) and leaves the attempt alone, for another one may.
    """
    caller = (call.worker_id, call.credential_id)
    with rt.pool.connection() as conn:
        task = task_rows.get_leased(
            conn, task_id, call.worker_id, call.credential_id, call.attempt, call.lease_token
        )
        if task is None:
            raise _lease_error(conn, task_id, caller, call.attempt, call.lease_token)
        job = job_rows.get(conn, task.job_id)
    if job is None:  # deleted with its tasks by retention since the task was read
        raise NotFound(f"task {task_id} does not exist")
    # A task's args are its input: the very bytes its input_sha256 was taken over.
    args = None if task.args is None else task.args.encode()
    where = None if args is not None else rt.workloads.of(task.workload).task_input(job, task)
    total = len(args) if args is not None else where.length
    first, last = byte_range or (0, None)
    if byte_range is not None and first >= total:
        raise RangeNotSatisfiable(
            f"the input is {total} bytes; the range starts at byte {first}",
            details={"length": total},
        )
    length = (total if last is None else min(last + 1, total)) - first
    if args is not None:
        reader: BinaryIO = io.BytesIO(args[first : first + length])
        origin = 0
    else:
        origin = where.offset + first
        reader = rt.archive.open_range(where.sha256, origin, length)
    served = InputFile(rt, reader, (task_id, call), origin=origin, first=first, length=length)
    return InputStream(first, length, total, served)


class InputFile:
    """An opened input's `length` bytes as a file for a WSGI file wrapper: read() for any
    server, fileno() for one that hands the range to the kernel's sendfile.

    Once the first byte is out, so are the headers: a failed read can only cut the stream,
    which the worker takes for a network blip and retries until its lease runs out. So the
    attempt is failed first, as input_unavailable within that class's retry budget, and the
    worker's next read is refused: in read(), or, for bytes the kernel sent, in close(), which
    finds how far socket.sendfile got (it seeks there) and reads the archive at that byte to
    tell a read error or a file cut short from a client that went away.
    """

    def __init__(
        self,
        rt: Runtime,
        reader: BinaryIO,
        lease: tuple[UUID, LeaseCall],
        *,
        origin: int,
        first: int,
        length: int,
    ):
        """reader stands at origin, the range's first byte, which is the input's byte first."""
        self._rt = rt
        self._reader = reader
        self._lease = lease
        self._origin = self._at = origin
        self._end = origin + length
        self._first = first
        self._failed = self._closed = False

    def fileno(self) -> int:
        """The archive file's descriptor, at the range's first byte (a stream has none)."""
        return self._reader.fileno()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move to offset; socket.sendfile calls this with where its send ended."""
        self._at = self._reader.seek(offset, whence)
        return self._at

    def read(self, size: int = -1) -> bytes:
        """The next block of the range, at most size bytes; b"" once it is all read."""
        wanted = min(READ_BLOCK if size < 0 else size, self._end - self._at)
        if wanted <= 0:
            return b""
        try:
            block = self._reader.read(wanted)
            if not block:
                raise self._cut_short()
        except (OSError, EOFError) as exc:
            self._fail(exc)
            raise
        self._at += len(block)
        return block

    def close(self) -> None:
        """Release the reader (the server calls this when the response ends, however it ends),
        first failing the attempt if a send by the kernel stopped short at a bad archive."""
        if self._closed:
            return  # a second close must not read a descriptor that is gone
        self._closed = True
        try:
            if self._at < self._end and not self._failed:
                self._probe()
        finally:
            self._reader.close()

    def _probe(self) -> None:
        try:
            fd = self._reader.fileno()
        except (AttributeError, OSError, io.UnsupportedOperation):
            return  # a stream, read only through read(), which fails the attempt itself
        try:
            if not os.pread(fd, 1, self._at):
                self._fail(self._cut_short())
        except OSError as exc:
            self._fail(exc)

    def _cut_short(self) -> EOFError:
        return EOFError(f"the archived input ends {self._end - self._at} bytes early")

    def _fail(self, exc: OSError | EOFError) -> None:
        self._failed = True
        task_id, call = self._lease
        _input_unreadable(self._rt, task_id, call, self._first + self._at - self._origin, exc)


def _input_unreadable(
    rt: Runtime,
    task_id: UUID,
    call: LeaseCall,
    sent: int,
    exc: OSError | EOFError,
) -> None:
    if isinstance(exc, EOFError):
        reason = "truncated"
    else:
        reason = errno.errorcode.get(exc.errno or 0, "OSError")
    logger.error(
        "archived input unreadable",
        extra={"event": "storage_error", "task_id": str(task_id), "error": str(exc)},
    )
    failure = TaskFailure(
        error_code="input_unavailable",
        error_message=f"the coordinator could not read the input after byte {sent}: {reason}",
        retryable=True,
        details={"directory": "archive", "setting": rt.archive.setting, "reason": reason},
    )
    try:
        c = call
        fail_task(rt, task_id, c.worker_id, c.credential_id, c.attempt, c.lease_token, failure)
    except (ChunkwiseError, psycopg.Error) as failed:
        # The lease already gone, or the database too: the worker's retries decide, as before.
        logger.warning(
            "could not fail the attempt whose input broke",
            extra={"event": "input_failure_unrecorded", "error": str(failed)},
        )


def expire_leases(rt: Runtime, now: datetime | None = None) -> list[ExpiredLease]:
    """Take back every lease that has run out, a job at a time (the maintenance loop calls this).

    Each job's expiries commit with the settling they cause, apart from every other job's: a
    job that cannot be settled holds back its own leases, not everyone's. The first failure
    is raised once every job has had its turn.
    """
    expired: list[ExpiredLease] = []
    failures: list[Exception] = []
    with rt.pool.connection() as conn:
        for job_id in task_rows.jobs_with_expired_leases(conn, now=now):
            try:
                with conn.transaction():
                    expired += _expire(conn, job_id, now, rt.workloads)
            except Exception as exc:
                if conn.broken:  # the database is gone: no other job would fare better
                    raise
                if failures:  # the first is the pass's to log, when it is raised
                    logger.error(
                        "could not take back a job's expired leases",
                        exc_info=exc,
                        extra={"event": "lease_expiry_error", "job_id": str(job_id)},
                    )
                failures.append(exc)
    if failures:
        raise failures[0]
    return expired


def cancel_strays(rt: Runtime) -> int:
    """Cancel the tasks a failed job left behind because they were locked as it failed."""
    with rt.pool.connection() as conn, conn.transaction():
        cancelled = task_rows.cancel_strays(conn)
    if cancelled:
        logger.info(
            "stray tasks cancelled", extra={"event": "strays_cancelled", "count": cancelled}
        )
    return cancelled


def _expire(
    conn: Connection, job_id: UUID, now: datetime | None, workloads: Workloads
) -> list[ExpiredLease]:
    expired = task_rows.expire(conn, job_id, now=now, lost_budget=LOST_RETRY_BUDGET)
    for lease in expired:
        t = lease.task
        if t.error_code == "timed_out":  # closed as a failure is, the handler's own doing
            outcome, said = ("retried" if t.status == "pending" else "failed"), "timed out"
        else:
            outcome, said = "lease_expired", "lease expired"
        closed = attempt_rows.finish(conn, t.id, t.attempt, outcome, t.error_code, t.error_message)
        # The sweeper logs under the attempt's own trace id, so the expiry joins the
        # worker's and the coordinator's lines for that attempt.
        with logcontext.scope(
            **_attempt_fields(t, lease.worker_id, closed.id if closed else None),
            trace_id=closed.trace_id if closed else None,
        ):
            logger.warning(
                f"attempt {said}", extra={"event": t.error_code, "next_status": t.status}
            )
    if any(lease.task.status == "failed" for lease in expired):
        job = job_rows.get(conn, job_id, for_update=True)
        settlement.settle(conn, job, workloads.of(job.workload))
    return expired


def _attempt_fields(task: Task, worker_id: str, attempt_id: UUID | None) -> dict:
    """The ids that put a log line on one attempt's thread."""
    return {
        "job_id": str(task.job_id),
        "task_id": str(task.id),
        "attempt": task.attempt,
        "worker_id": worker_id,
        "attempt_id": str(attempt_id) if attempt_id else None,
    }


def _task_or_404(conn: Connection, task_id: UUID) -> Task:
    task = task_rows.get(conn, task_id)
    if task is None:
        raise NotFound(f"task {task_id} does not exist")
    return task


def _worker_id_taken(worker_id: str) -> Forbidden:
    return Forbidden(
        f"worker id {worker_id!r} belongs to another worker credential",
        code="worker_id_taken",
        details={"fields": {"worker_id": ["belongs to another worker credential"]}},
    )


def _foreign_caller(
    conn: Connection, task_id: UUID, caller: tuple[str, int], attempt: int, lease_token: str
) -> ChunkwiseError | None:
    """The refusal for a caller that never held this attempt's lease; None for its holder.

    A caller without the lease's token learns nothing of the task: not its attempt, its
    status, nor why its own call was refused.
    """
    worker_id, credential_id = caller
    if worker_rows.bound_elsewhere(conn, worker_id, credential_id):
        return _worker_id_taken(worker_id)
    record = attempt_rows.find(conn, task_id, attempt)
    if (
        record is not None
        and record.worker_id == worker_id
        and record.lease_sha256 is not None
        and hmac.compare_digest(record.lease_sha256, task_rows.lease_digest(lease_token))
    ):
        return None
    return LeaseLost(
        "the caller does not hold this task's lease", details={"task_id": str(task_id)}
    )


def _lease_error(
    conn: Connection, task_id: UUID, caller: tuple[str, int], attempt: int, lease_token: str
) -> Exception:
    """Say why a fenced update matched nothing (the fence itself was the SQL): in detail to
    the lease's holder, and to anyone else only that the lease is not theirs."""
    task = task_rows.get(conn, task_id)
    if task is None:
        return NotFound(f"task {task_id} does not exist")
    foreign = _foreign_caller(conn, task_id, caller, attempt, lease_token)
    if foreign is not None:
        return foreign
    worker_id = caller[0]
    details = {
        "task_id": str(task_id),
        "attempt": attempt,
        "current_attempt": task.attempt,
        "status": task.status,
    }
    if task.status == "cancelled":
        return LeaseLost("the task's job was cancelled", code="task_cancelled", details=details)
    if _timed_out(conn, task, worker_id, attempt):
        return LeaseLost(
            f"attempt {attempt} ran past its job's timeout_seconds ({task.timeout_seconds})",
            code="timed_out",
            details=details,
        )
    if task.attempt != attempt:
        return LeaseLost(
            f"attempt {attempt} is stale; the task is at attempt {task.attempt}",
            code="stale_attempt",
            details=details,
        )
    return LeaseLost(
        "this worker does not hold the task's current lease", code="lease_lost", details=details
    )


def _timed_out(conn: Connection, task: Task, worker_id: str, attempt: int) -> bool:
    """Whether the caller's attempt ended at its deadline: still leased to the caller past it
    (the fence refused nothing else), or closed as timed out by the sweep."""
    if task.timeout_seconds is None:
        return False
    if task.status == "leased" and task.attempt == attempt:
        return task.lease_owner == worker_id
    record = attempt_rows.find(conn, task.id, attempt)
    return record is not None and record.worker_id == worker_id and record.error_code == "timed_out"


def _replayed_result(
    conn: Connection, completion: Completion, caller: tuple[str, int], result_sha256: str
) -> Task:
    c = completion
    task = task_rows.get(conn, c.task_id)
    if task is None:  # deleted with its job by retention since the batch first read it
        raise NotFound(f"task {c.task_id} does not exist")
    # Only the attempt's holder (its token) is answered about the stored result.
    foreign = _foreign_caller(conn, c.task_id, caller, c.attempt, c.lease_token)
    if foreign is None and task.status == "completed" and task.attempt == c.attempt:
        if task.result_sha256 == result_sha256:
            return task
        raise Conflict(
            "a different result was already accepted for this attempt",
            code="result_conflict",
            details={"task_id": str(c.task_id)},
        )
    raise _lease_error(conn, c.task_id, caller, c.attempt, c.lease_token)
