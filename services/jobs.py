"""Job use cases for every workload: create, view, list, cancel, retry, events; and settle."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from psycopg import Connection

from repositories import events as event_rows
from repositories import jobs as job_rows
from repositories import locks
from repositories import tasks as task_rows
from repositories import users as user_rows
from repositories.events import EventPage
from repositories.jobs import ChunkCounts, Job, JobSummary, NewJob, OwnerUsage
from repositories.tasks import NewTask
from services import dependencies, settlement, statistics, task_values
from services.auth import Principal
from services.deadlocks import rerun_deadlocks
from services.errors import (
    Conflict,
    InvalidInput,
    NotFound,
    QueueFull,
    QuotaExceeded,
    WaitRefused,
)
from services.runtime import Runtime
from services.task_values import CanonicalJson
from services.wakeups import RETRY_WAIT_SECONDS
from services.workloads import Caps

logger = logging.getLogger(__name__)

UNRECOVERABLE_ERRORS = frozenset({"invalid_input", "sum_overflow"})
UNFINISHED = ("queued", "running", "merging")
MAX_LABELS = 32
# Every event the outbox holds, as GET /api/v1/events names them.
EVENT_TYPES = (
    "job.created",
    "chunk.completed",
    "job.succeeded",
    "job.failed",
    "job.cancelled",
    "job.retried",
)


@dataclass(frozen=True)
class TaskSpec:
    """One task of a manifest job: its input at input_uri, or its JSON args."""

    input_uri: str | None
    input_sha256: str | None
    parameters: dict
    chunk_index: int | None = None
    args: dict | list | None = None


@dataclass(frozen=True)
class JobSpec:
    """A manifest job as the caller describes it."""

    workload: str
    input_uri: str | None
    parameters: dict
    tasks: Sequence[TaskSpec]
    priority: int = 0
    max_attempts: int | None = None
    labels: dict | None = None
    not_before: datetime | None = None
    timeout_seconds: int | None = None
    depends_on: Sequence[UUID] = ()

    @classmethod
    def from_dict(cls, values: dict) -> JobSpec:
        """A job spec from plain values: a request's, or a schedule's stored job."""
        return cls(**{**values, "tasks": [TaskSpec(**t) for t in values["tasks"]]})


@dataclass(frozen=True)
class JobView:
    """A job (or, in a list, its summary) with its owner's name, its chunk counts and progress."""

    job: Job | JobSummary
    owner: str
    counts: ChunkCounts
    progress: float
    created: bool = False

    @property
    def version(self) -> str:
        """Names what this view shows: it changes with the job's revision or any chunk count."""
        c = self.counts
        return f"{self.job.revision}.{c.pending}.{c.leased}.{c.completed}.{c.failed}.{c.cancelled}"


def progress(job: Job | JobSummary, counts: ChunkCounts) -> float:
    """The job's progress in [0, 1]."""
    return progress_of(job.status, counts.completed, job.chunks_total)


def progress_of(status: str, chunks_completed: int, chunks_total: int) -> float:
    """Completed chunks over chunks plus one final step: only success reaches 1.

    Completed chunks are never un-completed (a lost lease or a retry re-runs only the
    others), so this never decreases over the job's life.
    """
    if status == "succeeded":
        return 1.0
    return chunks_completed / (chunks_total + 1)


def request_digest(*parts: object) -> str:
    """A stable digest of what was asked, to tell an idempotent replay from a changed request."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def validate_labels(labels: dict | None) -> dict:
    """Labels are a small map of short strings: metadata, never instructions."""
    labels = labels or {}
    if len(labels) > MAX_LABELS:
        raise InvalidInput.field("labels", f"at most {MAX_LABELS} labels")
    for key, value in labels.items():
        if not isinstance(key, str) or not 1 <= len(key) <= 64 or "=" in key:
            raise InvalidInput.field("labels", f"bad label key {str(key)[:64]!r}")
        if not isinstance(value, str) or len(value) > 256:
            raise InvalidInput.field("labels", f"label {key!r} must be a string of ≤ 256 chars")
    return dict(labels)


def create_job(
    rt: Runtime,
    principal: Principal,
    spec: JobSpec,
    *,
    trace_id: str,
    idempotency_key: str | None = None,
) -> JobView:
    """Create a manifest job and all its tasks in one transaction (or nothing)."""
    new_job, new_tasks = plan_job(
        rt, principal, spec, trace_id=trace_id, idempotency_key=idempotency_key
    )
    return admit(rt, principal, new_job, new_tasks)


def plan_job(
    rt: Runtime,
    principal: Principal,
    spec: JobSpec,
    *,
    trace_id: str,
    idempotency_key: str | None = None,
) -> tuple[NewJob, list[NewTask]]:
    """Check a manifest job against every rule admission holds it to but the queue's room,
    and build its rows; nothing is written."""
    rules = rt.workloads.get(spec.workload)
    if rules is None:
        raise _unknown_workload(spec.workload)
    rules.check_manifest()
    indexes = [t.chunk_index for t in spec.tasks]
    if all(i is None for i in indexes):
        indexes = list(range(len(spec.tasks)))
    elif any(i is None for i in indexes):
        raise InvalidInput.field("tasks", "give chunk_index for every task or for none")
    if len(set(indexes)) != len(indexes):
        raise InvalidInput.field("tasks", "chunk_index values must be unique")
    dependencies.check_ids(spec.depends_on)
    labels = validate_labels(spec.labels)
    args = [
        None if t.args is None else task_values.task_args(t.args, f"tasks.{n}.args")
        for n, t in enumerate(spec.tasks)
    ]
    job_id = uuid.uuid4()
    max_attempts = spec.max_attempts or rt.limits.max_attempts
    new_job = NewJob(
        id=job_id,
        owner_id=principal.user_id,
        workload=spec.workload,
        input_uri=spec.input_uri or task_values.inline_input_uri(job_id),
        input_sha256=None,
        parameters=spec.parameters,
        labels=labels,
        priority=spec.priority,
        chunks_total=len(spec.tasks),
        idempotency_key=idempotency_key,
        request_sha256=request_digest(
            spec.workload,
            spec.input_uri,
            spec.parameters,
            spec.priority,
            max_attempts,
            labels,
            [
                # The args' digest only when given, so a replay of a request from before
                # sql/0030 still matches.
                (i, t.input_uri, t.input_sha256, t.parameters) + (() if a is None else (a.sha256,))
                for i, t, a in zip(indexes, spec.tasks, args, strict=True)
            ],
            # Only when given, so a replay of a request from before sql/0020 (sql/0021)
            # still matches.
            *([spec.not_before.isoformat()] if spec.not_before else []),
            *([{"timeout_seconds": spec.timeout_seconds}] if spec.timeout_seconds else []),
            *([{"depends_on": sorted(map(str, spec.depends_on))}] if spec.depends_on else []),
        ),
        trace_id=trace_id,
        max_attempts=max_attempts,
        not_before=spec.not_before,
        timeout_seconds=spec.timeout_seconds,
        depends_on=list(spec.depends_on) or None,
    )
    new_tasks = [
        _new_task(task_id(job_id, index), index, t, a, max_attempts)
        for index, t, a in zip(indexes, spec.tasks, args, strict=True)
    ]
    check_size(rt, spec.workload, len(new_tasks))
    return new_job, new_tasks


def _new_task(
    new_id: UUID, index: int, spec: TaskSpec, args: CanonicalJson | None, max_attempts: int
) -> NewTask:
    if args is None:
        uri, sha = spec.input_uri, spec.input_sha256
    else:
        uri, sha = task_values.inline_input_uri(new_id), args.sha256
    return NewTask(
        id=new_id,
        chunk_index=index,
        input_uri=uri,
        input_sha256=sha,
        parameters=spec.parameters,
        max_attempts=max_attempts,
        args=None if args is None else args.text,
    )


def task_id(job_id: UUID, chunk_index: int) -> UUID:
    """Task ids are deterministic: UUIDv5 of the job id and the chunk index."""
    return uuid.uuid5(job_id, str(chunk_index))


@rerun_deadlocks
def admit(
    rt: Runtime,
    principal: Principal,
    new_job: NewJob,
    new_tasks: list[NewTask],
    on_admitted: Callable[[], object] | None = None,
) -> JobView:
    """Insert a job with its tasks (check_size has passed them) if it fits the queue, or return
    the idempotent original.

    `on_admitted` runs once the job is in, before it commits: the CSV path stores its upload
    there, so a rejected job leaves nothing behind and a failed store admits nothing.
    """
    caps = rt.workloads.of(new_job.workload).caps
    with rt.pool.connection() as conn:
        # With nothing to run before the commit, a job that fits is one statement committing
        # on its own: most admissions are a single round trip.
        view = None
        # A dependent job's prerequisites stay locked until it is in: not on its own.
        if on_admitted is None and not new_job.depends_on:
            view = _try_admit(conn, principal, new_job, new_tasks, caps)
        if view is None:
            with conn.transaction():
                view = _try_admit(conn, principal, new_job, new_tasks, caps)
                if view is None:
                    view = _admit_after_recount(conn, rt, principal, new_job, new_tasks, caps)
                if view.created and on_admitted is not None:
                    on_admitted()
        if view.created:
            statistics.refresh_after_admission(conn, len(new_tasks))
    if view.created:
        logger.info(
            "job created",
            extra={
                "event": "job_created",
                "job_id": str(view.job.id),
                "chunks_total": len(new_tasks),
            },
        )
    return view


def check_size(rt: Runtime, workload: str, tasks: int) -> None:
    """Refuse a job larger than its workload allows one job, or than one user's share of its
    queue: that could never be admitted, so it is bad input, not a 429."""
    caps = rt.workloads.of(workload).caps
    most = min(caps.max_tasks_per_job, caps.max_queued_tasks, caps.user_queued_limit)
    if tasks > most:
        raise InvalidInput.field("tasks", f"a job may have at most {most} tasks")


def _try_admit(
    conn: Connection, principal: Principal, new_job: NewJob, new_tasks: list[NewTask], caps: Caps
) -> JobView | None:
    """The job admitted, or the original its Idempotency-Key replays; None if it did not fit."""
    replayed = _replay(conn, new_job)
    if replayed is not None:
        return replayed
    blocked = bool(new_job.depends_on) and dependencies.waits_for(
        conn, principal, new_job.depends_on
    )
    fits, job = job_rows.admit_job(
        conn,
        new_job,
        new_tasks,
        queue_limit=caps.max_queued_tasks,
        user_limit=caps.user_queued_limit,
        byte_limit=caps.user_bytes_limit,
        actor=principal.name,
        blocked=blocked,
    )
    if not fits:
        return None
    if job is None:
        # A request with the same key committed after this one looked for it.
        return _replay(conn, new_job)
    # Every task was just inserted pending: no need to count them back.
    counts = ChunkCounts(pending=len(new_tasks))
    return JobView(job, principal.name, counts, progress(job, counts), created=True)


def _admit_after_recount(
    conn: Connection,
    rt: Runtime,
    principal: Principal,
    new_job: NewJob,
    new_tasks: list[NewTask],
    caps: Caps,
) -> JobView:
    """Admit a job a bound refused if counts of the owner's and the queue's unfinished work
    make room."""
    # The bounds count finished tasks until a count corrects them (see sql/0008 and 0028);
    # the owner's row first, the order admission takes them in.
    usage = job_rows.recount_owner(conn, new_job.workload, new_job.owner_id)
    queued = task_rows.recount_unfinished(conn, new_job.workload)
    if queued is None:
        # Removed since this coordinator last reloaded its workloads: refused as it will be.
        raise _unknown_workload(new_job.workload)
    # A request with the same key may have filled the queue since the first look.
    replayed = _replay(conn, new_job)
    if replayed is not None:
        return replayed
    limit = caps.max_queued_tasks
    if queued + len(new_tasks) > limit:
        raise _queue_full(rt, new_job.workload, queued, len(new_tasks), limit)
    _check_share(rt, new_job, len(new_tasks), usage, caps)
    _check_stored_bytes(rt, new_job, job_rows.stored_bytes(conn, new_job, new_tasks), usage, caps)
    # It fits now: the counts hold the bounds' rows until this transaction ends.
    view = _try_admit(conn, principal, new_job, new_tasks, caps)
    if view is None:
        raise _queue_full(rt, new_job.workload, queued, len(new_tasks), limit)
    return view


def _unknown_workload(workload: str) -> InvalidInput:
    """The refusal of a job for a workload no coordinator serves."""
    return InvalidInput.field("workload", f"unknown workload {workload!r}")


def _check_share(rt: Runtime, new_job: NewJob, n: int, usage: OwnerUsage, caps: Caps) -> None:
    """Refuse a job that would take its owner past their share of the workload (sql/0028)."""
    workload = new_job.workload
    if usage.unfinished + n > caps.user_queued_limit:
        raise QuotaExceeded(
            f"you have {usage.unfinished} unfinished {workload} tasks; {n} more would exceed "
            f"your limit of {caps.user_queued_limit} (CHUNKWISE_USER_MAX_QUEUED_PERCENT of "
            "the workload's queue)",
            retry_after=rt.limits.heartbeat_seconds,
            details={
                "workload": workload,
                "limit": caps.user_queued_limit,
                "queued_chunks": usage.unfinished,
                "requested_chunks": n,
            },
        )


def _check_stored_bytes(
    rt: Runtime, new_job: NewJob, size: int, usage: OwnerUsage, caps: Caps
) -> None:
    """Refuse a job whose parameters and labels would take its owner's unfinished jobs in the
    workload past the bytes they may store (bad input if it alone is past them)."""
    limit = caps.user_bytes_limit
    if size > limit:
        raise InvalidInput.field(
            "parameters",
            f"a job's parameters and labels may store at most {limit} bytes "
            f"(CHUNKWISE_USER_MAX_STORED_BYTES); this one stores {size}",
        )
    if usage.stored_bytes + size > limit:
        raise QuotaExceeded(
            f"your unfinished {new_job.workload} jobs store {usage.stored_bytes} bytes of "
            f"parameters and labels; this one's {size} would exceed your limit of {limit} "
            "(CHUNKWISE_USER_MAX_STORED_BYTES)",
            retry_after=rt.limits.heartbeat_seconds,
            details={
                "workload": new_job.workload,
                "limit_bytes": limit,
                "stored_bytes": usage.stored_bytes,
                "requested_bytes": size,
            },
        )


def _replay(conn: Connection, new_job: NewJob) -> JobView | None:
    """The job this request's Idempotency-Key already created, if any (409 if another request
    created it)."""
    if new_job.idempotency_key is None:
        return None
    original = job_rows.find_by_idempotency_key(conn, new_job.owner_id, new_job.idempotency_key)
    if original is None:
        return None
    if original.request_sha256 != new_job.request_sha256:
        raise Conflict(
            "this Idempotency-Key was used for a different request",
            code="idempotency_conflict",
            details={"job_id": str(original.id)},
        )
    return _view(conn, original)


def get_job(
    rt: Runtime,
    principal: Principal,
    job_id: UUID,
    *,
    unless_versions: frozenset[str] = frozenset(),
    wait_seconds: float = 0,
    until_finished: bool = False,
) -> JobView:
    """The job's aggregate status, waiting up to wait_seconds while it is at unless_versions,
    or, until_finished, while it is unfinished (whatever changes on the way).

    Another user's job is NotFound, exactly like a missing one. WaitRefused, carrying the view,
    when it would wait and this process has no waiting place free.
    """
    if not (unless_versions or until_finished) or wait_seconds <= 0:
        return _read_view(rt, principal, job_id)
    deadline = time.monotonic() + wait_seconds
    with rt.wakeups.watching(job_id), rt.wakeups.waiting(True) as may_wait:
        view = None
        while True:
            # Counted before the read, so a change that commits in between is not missed.
            seen = rt.wakeups.job_changes(job_id)
            remaining = deadline - time.monotonic()
            # Waiting for the end, a change that leaves the job unfinished needs only its status
            # read: the whole job is read at the start, at the end and at the deadline.
            skim = until_finished and view is not None and remaining > 0
            if not skim or _read_status(rt, principal, job_id) not in UNFINISHED:
                view = _read_view(rt, principal, job_id)
                if until_finished:
                    answered = view.job.status not in UNFINISHED
                else:
                    answered = view.version not in unless_versions
                if answered or remaining <= 0:
                    return view
            if not may_wait:
                raise WaitRefused(RETRY_WAIT_SECONDS, view)
            # Re-check at least every second: a lost notification costs at most that.
            rt.wakeups.wait_for_job(job_id, seen, timeout=min(1.0, remaining))


def _read_view(rt: Runtime, principal: Principal, job_id: UUID) -> JobView:
    with rt.pool.connection() as conn:
        return _views(conn, [visible_job(conn, principal, job_id)], reader=principal)[0]


def _read_status(rt: Runtime, principal: Principal, job_id: UUID) -> str:
    with rt.pool.connection() as conn:
        status = job_rows.statuses(conn, [job_id], principal.visible_owner).get(job_id)
    if status is None:
        raise NotFound(f"job {job_id} does not exist")
    return status


def visible_job(
    conn: Connection, principal: Principal, job_id: UUID, *, for_update: bool = False
) -> Job:
    """Return the job if the principal may see it."""
    job = job_rows.get(conn, job_id, owner_id=principal.visible_owner, for_update=for_update)
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    return job


def list_jobs(
    rt: Runtime,
    principal: Principal,
    *,
    status: str | None,
    limit: int,
    cursor: str | None,
    label: tuple[str, str] | None = None,
    owner: str | None = None,
    workload: str | None = None,
    depends_on: UUID | None = None,
) -> tuple[list[JobView], str | None]:
    """The caller's jobs (an operator's: everyone's, or one owner's), newest first, a page at
    a time; optionally only those of a workload, with a label, or waiting for a job."""
    before = _decode_cursor(cursor) if cursor else None
    with rt.pool.connection() as conn:
        page = job_rows.list_jobs(
            conn,
            owner_id=principal.visible_owner,
            owner_name=owner,
            status=status,
            workload=workload,
            limit=limit + 1,
            before=before,
            label=label,
            depends_on=depends_on,
        )
        views = _views(conn, page[:limit])
    next_cursor = _encode_cursor(page[limit - 1]) if len(page) > limit else None
    return views, next_cursor


@rerun_deadlocks
def cancel_job(rt: Runtime, principal: Principal, job_id: UUID, *, trace_id: str) -> JobView:
    """Cancel a job: pending chunks stop, running ones hear 409 on their next heartbeat."""
    with rt.pool.connection() as conn, conn.transaction():
        job = _cancellable(visible_job(conn, principal, job_id))
        if job.status == "cancelled":
            return _view(conn, job)
        # The job's turn first, as its retry and a prerequisite's success take it: that
        # success may wait for the tasks this cancels, and the retry holds the rows of the
        # jobs it brings back while it waits for their tasks.
        locks.take_turn(conn, locks.DEPENDENTS, str(job_id))
        # Tasks before the job, the order a batch of results locks them in: the cancel waits
        # for a batch completing some of them, never the other way round. Re-checked under
        # the job's lock, since a merge may have finished it meanwhile (then this rolls back).
        task_rows.cancel_unfinished(conn, [job.id])
        job = _cancellable(visible_job(conn, principal, job_id, for_update=True))
        if job.status == "cancelled":
            return _view(conn, job)
        job = job_rows.set_status(conn, job.id, "cancelled")
        _record_user_action(conn, principal, job, "job.cancelled", "job.cancel", trace_id)
        settlement.settle_dependents(conn, job)
        view = _view(conn, job)
    logger.info("job cancelled", extra={"event": "job_cancelled", "job_id": str(job_id)})
    return view


@dataclass(frozen=True)
class Cancelled:
    """The jobs a filtered cancel cancelled, and whether more it matched remain."""

    cancelled: list[UUID]
    more: bool

    @property
    def count(self) -> int:
        """How many it cancelled."""
        return len(self.cancelled)


def cancel_jobs(
    rt: Runtime,
    principal: Principal,
    *,
    limit: int,
    trace_id: str,
    status: str | None = None,
    label: tuple[str, str] | None = None,
    owner: str | None = None,
    workload: str | None = None,
    depends_on: UUID | None = None,
) -> Cancelled:
    """Cancel up to `limit` of the caller's unfinished jobs the filters match (an operator's:
    anyone's), queued ones first, each as cancel_job does, in a transaction of its own."""
    matched: list[Job] = []
    with rt.pool.connection() as conn:
        for wanted in [status] if status else UNFINISHED:
            matched += job_rows.list_jobs(
                conn,
                owner_id=principal.visible_owner,
                owner_name=owner,
                status=wanted,
                workload=workload,
                limit=limit + 1 - len(matched),
                before=None,
                label=label,
                depends_on=depends_on,
            )
            if len(matched) > limit:
                break
    cancelled = []
    for job in matched[:limit]:
        try:
            cancel_job(rt, principal, job.id, trace_id=trace_id)
        except (Conflict, NotFound):
            continue  # finished, or deleted by retention, since it was listed
        cancelled.append(job.id)
    return Cancelled(cancelled, more=len(matched) > limit)


def _record_user_action(
    conn: Connection, principal: Principal, job: Job, event: str, action: str, trace_id: str
) -> None:
    """Tell the job's owner in the outbox, and the operators in the audit log."""
    event_rows.record(
        conn,
        job=job,
        event=event,
        payload={},
        actor=principal.name,
        action=action,
        trace_id=trace_id,
    )


def _cancellable(job: Job) -> Job:
    if job.status in ("succeeded", "failed"):
        raise Conflict(
            f"a {job.status} job cannot be cancelled",
            code="not_cancellable",
            details={"status": job.status},
        )
    return job


@rerun_deadlocks
def retry_job(rt: Runtime, principal: Principal, job_id: UUID, *, trace_id: str) -> JobView:
    """Re-queue a failed job's unfinished chunks, keeping every accepted summary (a dependent
    job's to wait again for the jobs it depends on that have yet to succeed), and those of the
    jobs its failure failed, to wait for it again; all of them or, with no room, none."""
    with rt.pool.connection() as conn, conn.transaction():
        # A dependent job's turn, as a prerequisite that succeeds takes it (see
        # services/settlement): that success then sees the tasks this requeues, or this sees
        # its status. Turn first, row second: the success may wait for the job's tasks, which
        # its cancel holds while waiting for the row.
        locks.take_turn(conn, locks.DEPENDENTS, str(job_id))
        job = visible_job(conn, principal, job_id, for_update=True)
        if job.status != "failed":
            raise Conflict(
                f"only a failed job can be retried; this one is {job.status}",
                code="not_failed",
                details={"status": job.status},
            )
        # The job's own reason decides: a chunk's bad input may not have been decisive yet
        # when an earlier chunk ran out of attempts, and a retry reaches the real answer.
        if (job.error or {}).get("code") in UNRECOVERABLE_ERRORS:
            raise Conflict(
                "the job failed on its input; retrying would fail the same way",
                code="not_recoverable",
                details={"error": job.error},
            )
        # The jobs its failure failed are locked before any queue bound, as an admission
        # waiting for them locks them before its bounds: the other way round, this and that
        # admission could each hold what the other waits for.
        dependents = dependencies.failed_with(conn, job)
        requeued = _requeue(rt, conn, [job], blocked=dependencies.still_waits(conn, job))
        # Running while a chunk of it is done; with none, back in the queue as it was admitted.
        done = job_rows.chunk_counts(conn, [job.id])[job.id].completed
        job = job_rows.set_status(conn, job.id, "running" if done else "queued")
        _record_user_action(conn, principal, job, "job.retried", "job.retry", trace_id)
        _bring_back_dependents(rt, conn, job, dependents, trace_id, requeued)
        view = _view(conn, job)
    return view


def _requeue(
    rt: Runtime, conn: Connection, jobs: Sequence[Job], *, blocked: bool, already: int = 0
) -> int:
    """Put these locked failed jobs' (of one workload) unfinished tasks back, within the
    workload's queue bound, as admission is: a retry adds tasks to the queue too. How many;
    a refusal counts the `already` this retry put back in that queue as asked for, not queued.
    """
    workload = jobs[0].workload
    caps = rt.workloads.of(workload).caps
    limit = caps.max_queued_tasks
    budgets = {job.id: job.max_attempts or rt.limits.max_attempts for job in jobs}
    # Not refused by the owners' shares (the jobs were admitted within them), but counted, and
    # queued at the back of each owner's line rather than ahead of everyone's.
    first_tags = job_rows.raise_owner_bounds(
        conn, jobs, workload, user_limit=caps.user_queued_limit
    )
    requeue = functools.partial(
        task_rows.requeue_unfinished,
        conn,
        budgets,
        workload,
        queue_limit=limit,
        first_tags=first_tags,
        blocked=blocked,
    )
    fits, n = requeue()
    if not fits:
        queued = task_rows.recount_unfinished(conn, workload)
        if queued is None:
            # Removed since this coordinator last reloaded: no room, as its reload will say.
            raise _queue_full(rt, workload, 0, n + already, 0)
        if queued + n > limit:
            raise _queue_full(rt, workload, queued - already, n + already, limit)
        # It fits now: the count holds the bound's row until this transaction ends.
        requeue()
    return n


def _bring_back_dependents(
    rt: Runtime,
    conn: Connection,
    job: Job,
    dependents: list[Job],
    trace_id: str,
    requeued: int,
) -> None:
    """Queue again the (locked) jobs a retried job's failure failed, to wait for it (they
    never ran); `requeued` of the job's own tasks are back in its workload's queue already."""
    if not dependents:
        return
    for workload in sorted({d.workload for d in dependents}):
        _requeue(
            rt,
            conn,
            [d for d in dependents if d.workload == workload],
            blocked=True,
            already=requeued if workload == job.workload else 0,
        )
    requeued = job_rows.requeue_many(conn, [d.id for d in dependents])
    event_rows.publish_many(
        conn,
        [
            {
                "job_id": d.id,
                "owner_id": d.owner_id,
                "event": "job.retried",
                "payload": {"retried_with": str(job.id)},
                "trace_id": trace_id,
            }
            for d in requeued
        ],
    )


def _queue_full(rt: Runtime, workload: str, queued: int, requested: int, limit: int) -> QueueFull:
    return QueueFull(
        f"the queue holds {queued} unfinished {workload} tasks; "
        f"{requested} more would exceed the limit of {limit}",
        retry_after=rt.limits.heartbeat_seconds,
        details={"queued_chunks": queued, "requested_chunks": requested, "limit": limit},
    )


def list_events(
    rt: Runtime,
    principal: Principal,
    *,
    after: int,
    limit: int,
    job_id: UUID | None = None,
    types: Sequence[str] | None = None,
) -> EventPage:
    """Outbox events after an id, in order: the owner's, or everyone's for an operator; only
    one job's when job_id is given, only these types when types are."""
    owner = principal.visible_owner
    with rt.pool.connection() as conn:
        return event_rows.list_events(
            conn, owner_id=owner, after=after, limit=limit, job_id=job_id, types=types
        )


def _view(conn: Connection, job: Job) -> JobView:
    return _views(conn, [job])[0]


def _views(
    conn: Connection, jobs: Sequence[Job | JobSummary], reader: Principal | None = None
) -> list[JobView]:
    counts = job_rows.chunk_counts(conn, [j.id for j in jobs])
    # A user's name never changes, so a reader who owns every job (a watch, mostly) needs none
    # read: one statement fewer on each of a watched job's changes.
    owners = {j.owner_id for j in jobs}
    if reader is not None and reader.kind == "user" and owners == {reader.user_id}:
        names = {reader.user_id: reader.name}
    else:
        names = user_rows.names(conn, owners)
    return [JobView(j, names[j.owner_id], counts[j.id], progress(j, counts[j.id])) for j in jobs]


def _encode_cursor(job: JobSummary) -> str:
    raw = f"{job.created_at.isoformat()}|{job.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, job_id = raw.split("|")
        return datetime.fromisoformat(at), UUID(job_id)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput.field("cursor", "not a cursor this API returned") from exc


def fold_chunk_tallies(rt: Runtime) -> None:
    """Fold the rows the tasks' changes added to the jobs' tallies, so a read sums a few."""
    with rt.pool.connection() as conn:
        job_rows.fold_chunk_tallies(conn)


def delete_expired_history(rt: Runtime) -> int:
    """Delete jobs finished longer ago than the retention period (none when it is unset)."""
    if rt.limits.retention_days is None:
        return 0
    with rt.pool.connection() as conn, conn.transaction():
        deleted = job_rows.delete_finished(conn, older_than_days=rt.limits.retention_days)
    if deleted:
        logger.info(
            "finished jobs deleted",
            extra={"event": "history_deleted", "jobs": deleted, "days": rt.limits.retention_days},
        )
    return deleted
