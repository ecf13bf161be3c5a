"""csv_stats jobs: submit an uploaded CSV as chunks, accept chunk summaries, merge exactly once."""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from psycopg import Connection
from psycopg_pool import ConnectionPool

from repositories import chunk_summaries as summary_rows
from repositories import events as event_rows
from repositories import jobs as job_rows
from repositories import tasks as task_rows
from repositories.jobs import Job, NewJob
from repositories.tasks import NewTask, Task
from services import archive, csvstats, metrics, settlement
from services import jobs as job_rules
from services.auth import Principal
from services.errors import Conflict, InvalidInput, PayloadTooLarge
from services.runtime import Runtime
from services.workloads import Caps, TaskFailure, TaskInput, TaskResult, Workload

logger = logging.getLogger(__name__)

WORKLOAD = "csv_stats"
MAX_CHUNKS = csvstats.MAX_CHUNKS


@dataclass(frozen=True)
class CsvJobRequest:
    """The form fields of a CSV submission."""

    column: str
    delimiter: str = ","
    chunks: int = 1
    priority: int = 0
    labels: dict | None = None
    not_before: datetime | None = None


def submit_csv_job(
    rt: Runtime,
    principal: Principal,
    spooled: archive.Spooled,
    request: CsvJobRequest,
    *,
    trace_id: str,
    idempotency_key: str | None = None,
) -> job_rules.JobView:
    """Validate and split an uploaded CSV, then admit the job and its chunks in one transaction.

    The spool stays the caller's to remove: the app removes it once the response is sent, so
    that freeing a duplicate's blocks (or every spool, over S3) never delays the answer.
    """
    if spooled.size > rt.limits.max_upload_bytes:
        raise PayloadTooLarge(
            f"the file is larger than {rt.limits.max_upload_bytes} bytes",
            details={"limit": rt.limits.max_upload_bytes},
        )
    if not 1 <= request.chunks <= MAX_CHUNKS:
        raise InvalidInput.field("chunks", f"must be between 1 and {MAX_CHUNKS}")
    labels = job_rules.validate_labels(request.labels)
    try:
        upload, split = hash_and_split(spooled, request.column, request.delimiter, request.chunks)
    except csvstats.CsvFormatError as exc:
        raise InvalidInput.field(exc.field, exc.message) from exc
    job_id = uuid.uuid4()
    new_job = NewJob(
        id=job_id,
        owner_id=principal.user_id,
        workload=WORKLOAD,
        input_uri=archive.input_uri(upload.sha256),
        input_sha256=upload.sha256,
        parameters={
            "column": request.column,
            "delimiter": request.delimiter,
            "chunks": request.chunks,
            "column_index": split.column_index,
            "records": split.records,
        },
        labels=labels,
        priority=request.priority,
        chunks_total=len(split.plans),
        idempotency_key=idempotency_key,
        request_sha256=job_rules.request_digest(
            upload.sha256,
            request.column,
            request.delimiter,
            request.chunks,
            request.priority,
            labels,
            # Only when given, so a replay of a request from before sql/0020 still matches.
            *([request.not_before.isoformat()] if request.not_before else []),
        ),
        trace_id=trace_id,
        max_attempts=rt.limits.max_attempts,
        not_before=request.not_before,
    )
    new_tasks = [
        _chunk_task(job_id, plan, split, request, rt.limits.max_attempts) for plan in split.plans
    ]
    job_rules.check_size(rt, WORKLOAD, len(new_tasks))
    staged = rt.archive.stage(upload)
    try:
        return job_rules.admit(
            rt,
            principal,
            new_job,
            new_tasks,
            on_admitted=lambda: rt.archive.store(staged),
        )
    finally:
        if staged.path != upload.path:  # a copy on the archive's filesystem, not stored
            staged.path.unlink(missing_ok=True)


def hash_and_split(
    spooled: archive.Spooled, column: str, delimiter: str, chunks: int
) -> tuple[archive.Upload, csvstats.SplitResult]:
    """The spool's digest and its split, taken side by side: a thread reads and hashes the file
    (hashlib lets go of the GIL) on the core the split's numpy scan leaves idle. A file the
    split refuses stops the hashing at its next block. The spool's sync to disk, under way
    since the body ended, is waited for last: its failure answers first, whatever the split
    found."""
    cancelled = threading.Event()
    try:
        with ThreadPoolExecutor(max_workers=1) as hashing:
            digest = hashing.submit(archive.spool_sha256, spooled, cancelled)
            try:
                split = split_spool(spooled, column, delimiter, chunks)
            except OSError as exc:  # the spool gone or unreadable under the split's memory map
                cancelled.set()
                raise archive.storage_failure(exc, archive.TEMP, "read") from exc
            except BaseException:
                cancelled.set()
                raise
            return archive.Upload(spooled.path, digest.result(), spooled.size), split
    finally:
        spooled.wait_until_on_disk()


def split_spool(
    spooled: archive.Spooled, column: str, delimiter: str, chunks: int = 1
) -> csvstats.SplitResult:
    """Split the spooled file through a memory map: the file is never read into one object."""
    if spooled.size == 0:
        return csvstats.split(b"", column, delimiter, chunks)  # an empty file cannot be mapped
    with spooled.path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return csvstats.split(data, column, delimiter, chunks)


def csv_problems(
    rt: Runtime, spooled: archive.Spooled, column: str, delimiter: str
) -> dict[str, list[str]]:
    """What submit_csv_job would refuse in the file itself (its size, its header, the column),
    by field, for a form that shows every refusal at once."""
    if spooled.size > rt.limits.max_upload_bytes:
        return {"file": [f"the file is larger than {rt.limits.max_upload_bytes} bytes"]}
    try:
        split_spool(spooled, column, delimiter)
    except csvstats.CsvFormatError as exc:
        return {exc.field: [exc.message]}
    return {}


def _chunk_task(
    job_id: UUID,
    plan: csvstats.ChunkPlan,
    split: csvstats.SplitResult,
    request: CsvJobRequest,
    max_attempts: int,
) -> NewTask:
    task_id = job_rules.task_id(job_id, plan.index)
    return NewTask(
        id=task_id,
        chunk_index=plan.index,
        input_uri=f"/api/v1/tasks/{task_id}/input",
        input_sha256=plan.sha256,
        parameters={
            "column": request.column,
            "column_index": split.column_index,
            "delimiter": request.delimiter,
            "record_start": plan.record_start,
            "record_end": plan.record_end,
            "first_line": plan.first_line,
            "byte_start": plan.byte_start,
            "byte_end": plan.byte_end,
        },
        max_attempts=max_attempts,
    )


def chunk_plan(task: Task) -> csvstats.ChunkPlan:
    """Rebuild a chunk's plan from its task row."""
    p = task.parameters
    return csvstats.ChunkPlan(
        index=task.chunk_index,
        record_start=p["record_start"],
        record_end=p["record_end"],
        first_line=p["first_line"],
        byte_start=p["byte_start"],
        byte_end=p["byte_end"],
        sha256=task.input_sha256,
    )


class CsvStats(Workload):
    """csv_stats: chunks of an archived CSV, one checked summary each, merged exactly once."""

    merged = True

    def __init__(self, caps: Caps):
        super().__init__(WORKLOAD, caps)

    def check_manifest(self) -> None:
        """csv_stats jobs come from an upload, never from a manifest."""
        raise InvalidInput.field(
            "workload", "csv_stats jobs are submitted as a multipart CSV upload"
        )

    def check_result(self, task: Task, result: TaskResult) -> tuple[str, str]:
        """Validate a worker's summary against the chunk's plan; return its uri and digest."""
        summary = result.summary
        if summary is None:
            raise InvalidInput.field("summary", "required for csv_stats results")
        try:
            parsed = csvstats.Summary.from_dict(summary)
        except (ValueError, TypeError, KeyError) as exc:
            raise InvalidInput.field("summary", f"malformed summary: {exc}") from exc
        plan = chunk_plan(task)
        if parsed.error is not None:
            raise InvalidInput.field("summary", "a summary with an error is reported as a failure")
        if parsed.digest != plan.sha256:
            raise InvalidInput(
                "the summary's digest does not match the chunk's bytes",
                code="digest_mismatch",
                # Never the expected digest: a refusal must not teach anyone the right answer.
                details={"fields": {"summary.digest": ["does not match the chunk"]}},
            )
        if parsed.records != plan.record_end - plan.record_start:
            raise InvalidInput.field(
                "summary.records", f"expected {plan.record_end - plan.record_start} records"
            )
        canonical = json.dumps(parsed.to_dict(), sort_keys=True, separators=(",", ":"))
        return (
            f"/api/v1/jobs/{task.job_id}/chunks/{task.id}",
            hashlib.sha256(canonical.encode()).hexdigest(),
        )

    def accept_result(self, conn: Connection, task: Task, result: TaskResult) -> None:
        """Store the accepted summary of a just-completed chunk."""
        parsed = csvstats.Summary.from_dict(result.summary)
        if not summary_rows.insert_summary(
            conn,
            task_id=task.id,
            job_id=task.job_id,
            chunk_index=task.chunk_index,
            attempt=task.attempt,
            summary=parsed.to_dict(),
        ):
            raise Conflict("a summary was already accepted for this chunk", code="result_conflict")

    def check_failure(self, task: Task, failure: TaskFailure) -> None:
        """An invalid_input failure must carry the chunk's statistics up to its bad record."""
        try:
            parsed = csvstats.Summary.from_dict(failure.details["summary"])
        except (ValueError, TypeError, KeyError) as exc:
            raise InvalidInput.field(
                "details.summary", f"invalid_input needs the partial summary: {exc}"
            ) from exc
        if parsed.error is None:
            raise InvalidInput.field("details.summary", "must carry the invalid record")
        if parsed.digest != task.input_sha256:
            raise InvalidInput(
                "the summary's digest does not match the chunk's bytes",
                code="digest_mismatch",
                details={"fields": {"details.summary.digest": ["does not match"]}},
            )

    def task_input(self, job: Job, task: Task) -> TaskInput:
        """The chunk's byte range of the archived upload."""
        p = task.parameters
        return TaskInput(job.input_sha256, p["byte_start"], p["byte_end"] - p["byte_start"])

    def accepted_summaries(self, conn: Connection, job_id: UUID) -> dict[UUID, dict]:
        """Each completed chunk's accepted summary, by task id."""
        return {s.task_id: s.summary for s in summary_rows.summaries(conn, job_id)}

    def partial_result(self, conn: Connection, job: Job) -> dict | None:
        """The totals of the chunks accepted before the job failed."""
        accepted = summary_rows.summaries(conn, job.id)
        if not accepted:
            return None
        totals = csvstats.partial_totals(csvstats.Summary.from_dict(a.summary) for a in accepted)
        return {**totals.to_dict(), "chunks": [a.chunk_index for a in accepted], "partial": True}

    def merge(self, pool: ConnectionPool, job_id: UUID) -> Job | None:
        """Merge a job's chunk summaries exactly once; a no-op unless the job is merging."""
        started = time.monotonic()
        with pool.connection() as conn, conn.transaction():
            job = job_rows.get(conn, job_id, for_update=True)
            if job is None or job.status != "merging":
                return job
            job = self._merge_locked(conn, job, started)
        metrics.MERGE_SECONDS.observe(time.monotonic() - started)
        outcome = job.status if job.status == "succeeded" else job.error["code"]
        metrics.MERGES.labels(outcome).inc()
        logger.info(
            "job merged",
            extra={
                "event": "job_merged",
                "job_id": str(job_id),
                "status": job.status,
                "merge_seconds": job.merge_seconds,
            },
        )
        return job

    def _merge_locked(self, conn: Connection, job: Job, started: float) -> Job:
        tasks = task_rows.list_for_job(conn, job.id)
        plans = [chunk_plan(t) for t in tasks]
        summaries = [
            csvstats.Summary.from_dict(s.summary) for s in summary_rows.summaries(conn, job.id)
        ]
        bad = next(
            (t for t in tasks if t.status == "failed" and t.error_code == "invalid_input"), None
        )
        if bad is not None:
            # The failure carried the chunk's statistics up to the bad record, so the merge can
            # tell whether the sequential loop would have overflowed before reaching it.
            summaries = summaries[: bad.chunk_index]
            summaries.append(csvstats.Summary.from_dict(bad.error_details["summary"]))
        try:
            totals = csvstats.merge(plans, summaries)
        except csvstats.SumOverflow as exc:
            error = {
                "code": "sum_overflow",
                "message": f"the int64 sum overflows within chunk {exc.chunk_index}",
                "details": {"chunk_index": exc.chunk_index},
            }
            return settlement.fail_with_error(conn, job, error, self)
        except csvstats.BadRecord as exc:
            error = {
                "code": "invalid_input",
                "message": exc.record.message(),
                "details": {"chunk_index": exc.chunk_index, **exc.record.to_dict()},
            }
            return settlement.fail_with_error(conn, job, error, self)
        except csvstats.MergeError as exc:
            error = {
                "code": "merge_failed",
                "message": str(exc),
                "details": {"chunk_index": exc.chunk_index},
            }
            return settlement.fail_with_error(conn, job, error, self)
        job = job_rows.set_status(
            conn,
            job.id,
            "succeeded",
            result=totals.to_dict(),
            merge_seconds=time.monotonic() - started,
        )
        event_rows.publish(
            conn,
            job_id=job.id,
            owner_id=job.owner_id,
            event="job.succeeded",
            payload={"result": totals.to_dict()},
            trace_id=job.trace_id,
        )
        settlement.settle_dependents(conn, job)
        return job
