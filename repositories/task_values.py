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
        SELECT * FROM unnest(%(ids)b::uuid[], %(texts)b::text[])
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


def page_for_job(
    conn: Connection, job_id: UUID, *, after_index: int, limit: int
) -> list[CompletedResult]:
    """Up to `limit` of a job's completed tasks in chunk order, from the first past
    `after_index`, each with its stored value if it has one."""
    rows = conn.execute(
        """
        SELECT t.id, t.chunk_index, t.attempt, t.result_uri, t.result_sha256, t.metrics,
               t.completed_at, r.value
        FROM tasks t LEFT JOIN task_results r ON r.task_id = t.id
        WHERE t.job_id = %(job)s AND t.chunk_index > %(after)s AND t.status = 'completed'
        ORDER BY t.chunk_index
        LIMIT %(limit)s
        """,
        {"job": job_id, "after": after_index, "limit": limit},
    ).fetchall()
    return [from_row(CompletedResult, r) for r in rows]
