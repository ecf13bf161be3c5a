"""Stored result values (sql/0030), written with their task's completion and read by owners."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from psycopg import Connection

from repositories import from_row


@dataclass(frozen=True)
class StoredValue:
    """A value to store for a task that was just completed: its canonical JSON text."""

    task_id: UUID
    text: str


@dataclass(frozen=True)
class CompletedResult:
    """A completed task's result manifest, with its stored value's text if it has one."""

    id: UUID
    chunk_index: int
    attempt: int
    result_uri: str
    result_sha256: str
    metrics: dict | None
    completed_at: datetime
    value: str | None


def store(conn: Connection, values: Sequence[StoredValue]) -> None:
    """Store the values of tasks completed in the caller's transaction, in one statement.

    Only a completion the fenced update accepted gets here, so the value it brings is the one
    the task's result_sha256 now names, and it replaces any other.
    """
    conn.execute(
        """
        INSERT INTO task_results (task_id, value)
        SELECT v.task_id, v.value
        FROM unnest(%(ids)b::uuid[], %(texts)b::text[]) AS v(task_id, value)
        ON CONFLICT (task_id) DO UPDATE SET value = EXCLUDED.value
        """,
        {"ids": [v.task_id for v in values], "texts": [v.text for v in values]},
    )


def get(conn: Connection, task_id: UUID) -> str | None:
    """A task's stored value as its canonical JSON text, or None."""
    row = conn.execute(
        "SELECT value FROM task_results WHERE task_id = %(id)s", {"id": task_id}
    ).fetchone()
    return row["value"] if row else None


@dataclass(frozen=True)
class ResultPage:
    """A page of completed results, and the chunk_index to ask for the next page after (None
    when this page is the last)."""

    results: list[CompletedResult]
    next_after: int | None


def page_for_job(
    conn: Connection, job_id: UUID, *, after_index: int, limit: int, max_bytes: int
) -> ResultPage:
    """Up to `limit` of a job's completed tasks in chunk order, from the first past
    `after_index`, each with its stored value if it has one, ending with the one that takes
    the values and metrics past `max_bytes` (always at least one)."""
    rows = conn.execute(
        """
        SELECT id, chunk_index, attempt, result_uri, result_sha256, metrics, completed_at, value,
               bytes_through
        FROM (
            SELECT t.id, t.chunk_index, t.attempt, t.result_uri, t.result_sha256, t.metrics,
                   t.completed_at, r.value,
                   sum(coalesce(octet_length(r.value), 0) + coalesce(pg_column_size(t.metrics), 0))
                       OVER (ORDER BY t.chunk_index) AS bytes_through
            FROM tasks t LEFT JOIN task_results r ON r.task_id = t.id
            WHERE t.job_id = %(job)s AND t.chunk_index > %(after)s AND t.status = 'completed'
            ORDER BY t.chunk_index
            LIMIT %(limit)s
        ) page
        WHERE bytes_through - coalesce(octet_length(value), 0)
              - coalesce(pg_column_size(metrics), 0) < %(max_bytes)s
        ORDER BY chunk_index
        """,
        {"job": job_id, "after": after_index, "limit": limit, "max_bytes": max_bytes},
    ).fetchall()
    results = [from_row(CompletedResult, r) for r in rows]
    # A page cut short by its count or its bytes may have more after it; any other is the last.
    full = len(rows) == limit or (rows and rows[-1]["bytes_through"] >= max_bytes)
    return ResultPage(results, results[-1].chunk_index if full else None)
