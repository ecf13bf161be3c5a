"""Chunk views: a job's tasks with their attempt history and accepted summary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from psycopg import Connection

from repositories import attempts as attempt_rows
from repositories import chunks as chunk_rows
from repositories import tasks as task_rows
from repositories.attempts import Attempt
from repositories.chunks import TaskSummary
from repositories.tasks import Task
from services import csvjobs
from services.auth import Principal
from services.errors import NotFound
from services.jobs import visible_job
from services.runtime import Runtime


@dataclass(frozen=True)
class ChunkView:
    """One chunk as a user sees it (in a list, its task's summary)."""

    task: Task | TaskSummary
    attempts: list[Attempt]
    summary: dict | None


def list_chunks(
    rt: Runtime, principal: Principal, job_id: UUID, *, after_index: int = -1, limit: int = 1000
) -> list[ChunkView]:
    """Up to `limit` chunks of a visible job in order, from the first past `after_index`."""
    with rt.pool.connection() as conn:
        job = visible_job(conn, principal, job_id)
        tasks = chunk_rows.page_for_job(
            conn, job_id, after_index=after_index, limit=limit, csv_workload=csvjobs.WORKLOAD
        )
        return _views(conn, rt, job.workload, job_id, tasks)


def get_chunk(rt: Runtime, principal: Principal, job_id: UUID, chunk_id: UUID) -> ChunkView:
    """One chunk of a visible job."""
    with rt.pool.connection() as conn:
        job = visible_job(conn, principal, job_id)
        task = task_rows.get(conn, chunk_id)
        if task is None or task.job_id != job_id:
            raise NotFound(f"chunk {chunk_id} does not exist in job {job_id}")
        [view] = _views(conn, rt, job.workload, job_id, [task])
    return view


def _views(
    conn: Connection, rt: Runtime, workload: str, job_id: UUID, tasks: Sequence[Task | TaskSummary]
) -> list[ChunkView]:
    attempts = attempt_rows.of_tasks(conn, [t.id for t in tasks])
    summaries = rt.workloads.of(workload).accepted_summaries(conn, job_id)
    by_task: dict[UUID, list[Attempt]] = {}
    for a in attempts:
        by_task.setdefault(a.task_id, []).append(a)
    return [ChunkView(t, by_task.get(t.id, []), summaries.get(t.id)) for t in tasks]
