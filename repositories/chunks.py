"""A job's chunks as its chunk list shows them: task rows without their payloads."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from psycopg import Connection

from repositories import from_row
from repositories.tasks import BLOCKED

# How much of a task's args and result value a page of chunks shows, and of a traceback (a
# worker sends up to 4000 characters of one).
PREVIEW_CHARS = 200
TRACEBACK_CHARS = 4000


@dataclass(frozen=True)
class TaskSummary:
    """A task without its parameters, checkpoint, metrics or error details.

    Each of those may be as large as a request body (4 MiB) and a page holds up to 1,000
    tasks; the one chunk's own view (repositories.tasks.get) has them all. A CSV chunk's
    record range is all its parameters a list shows.
    """

    id: UUID
    job_id: UUID
    chunk_index: int
    workload: str
    input_uri: str
    input_sha256: str
    status: str
    attempt: int
    max_attempts: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    result_uri: str | None
    result_sha256: str | None
    error_code: str | None
    error_message: str | None
    not_before: datetime | None
    deadline: datetime | None
    record_start: int | None
    record_end: int | None
    # The first PREVIEW_CHARS (and one more, to tell a cut one) of its args and of its stored
    # result value (sql/0030), and TRACEBACK_CHARS of its last failed attempt's traceback.
    args_preview: str | None = None
    value_preview: str | None = None
    traceback_preview: str | None = None

    @property
    def blocked(self) -> bool:
        """Whether it waits for the jobs its job depends on, rather than for a time."""
        return self.not_before == BLOCKED


def page_for_job(
    conn: Connection, job_id: UUID, *, after_index: int, limit: int, csv_workload: str
) -> list[TaskSummary]:
    """Up to `limit` of a job's task summaries in chunk order, from the first past
    `after_index`; the record range is read only for `csv_workload`'s tasks (a manifest
    task's parameters may use those names for anything)."""
    rows = conn.execute(
        """
        SELECT id, job_id, chunk_index, workload, input_uri, input_sha256, status, attempt,
               max_attempts, lease_owner, lease_expires_at, result_uri, result_sha256,
               error_code, error_message, not_before, deadline,
               CASE WHEN workload = %(csv)s THEN (parameters ->> 'record_start')::bigint
               END AS record_start,
               CASE WHEN workload = %(csv)s THEN (parameters ->> 'record_end')::bigint
               END AS record_end,
               left(args, %(preview)s) AS args_preview,
               (SELECT left(r.value, %(preview)s) FROM task_results r
                WHERE r.task_id = tasks.id) AS value_preview,
               left(error_details ->> 'traceback', %(traceback)s) AS traceback_preview
        FROM tasks
        WHERE job_id = %(job)s AND chunk_index > %(after)s
        ORDER BY chunk_index
        LIMIT %(limit)s
        """,
        {
            "job": job_id,
            "after": after_index,
            "limit": limit,
            "csv": csv_workload,
            "preview": PREVIEW_CHARS + 1,
            "traceback": TRACEBACK_CHARS,
        },
    ).fetchall()
    return [from_row(TaskSummary, r) for r in rows]
