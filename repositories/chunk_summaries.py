"""Accepted chunk summaries of csv_stats jobs (one per chunk, enforced by the primary key)."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from psycopg import Connection
from psycopg.types.json import Jsonb

from repositories import from_row


@dataclass(frozen=True)
class AcceptedSummary:
    """The one summary accepted for a chunk."""

    task_id: UUID
    chunk_index: int
    attempt: int
    summary: dict


def insert_summary(
    conn: Connection, *, task_id: UUID, job_id: UUID, chunk_index: int, attempt: int, summary: dict
) -> bool:
    """Accept a chunk's summary; False when one was already accepted."""
    row = conn.execute(
        """
        INSERT INTO chunk_summaries (task_id, job_id, chunk_index, attempt, summary)
        VALUES (%(task)s, %(job)s, %(index)s, %(attempt)s, %(summary)s)
        ON CONFLICT DO NOTHING
        RETURNING task_id
        """,
        {
            "task": task_id,
            "job": job_id,
            "index": chunk_index,
            "attempt": attempt,
            "summary": Jsonb(summary),
        },
    ).fetchone()
    return row is not None


def summaries(conn: Connection, job_id: UUID) -> list[AcceptedSummary]:
    """A job's accepted summaries in chunk order."""
    rows = conn.execute(
        """
        SELECT task_id, chunk_index, attempt, summary FROM chunk_summaries
        WHERE job_id = %(job)s ORDER BY chunk_index
        """,
        {"job": job_id},
    ).fetchall()
    return [from_row(AcceptedSummary, r) for r in rows]
