"""Chunk views: a job's tasks with their attempt history and accepted summary."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from repositories import tasks as task_rows
from repositories.tasks import Attempt, Task
from services.auth import Principal
from services.errors import NotFound
from services.jobs import visible_job
from services.runtime import Runtime


@dataclass(frozen=True)
class ChunkView:
    """One chunk as a user sees it."""

    task: Task
    attempts: list[Attempt]
    summary: dict | None


def list_chunks(rt: Runtime, principal: Principal, job_id: UUID) -> list[ChunkView]:
    """Every chunk of a visible job, in order."""
    with rt.pool.connection() as conn:
        job = visible_job(conn, principal, job_id)
        tasks = task_rows.list_for_job(conn, job_id)
        attempts = task_rows.attempts(conn, [t.id for t in tasks])
        summaries = rt.workloads.of(job.workload).accepted_summaries(conn, job_id)
    by_task: dict[UUID, list[Attempt]] = {}
    for a in attempts:
        by_task.setdefault(a.task_id, []).append(a)
    return [ChunkView(t, by_task.get(t.id, []), summaries.get(t.id)) for t in tasks]


def get_chunk(rt: Runtime, principal: Principal, job_id: UUID, chunk_id: UUID) -> ChunkView:
    """One chunk of a visible job."""
    for view in list_chunks(rt, principal, job_id):
        if view.task.id == chunk_id:
            return view
    raise NotFound(f"chunk {chunk_id} does not exist in job {job_id}")
