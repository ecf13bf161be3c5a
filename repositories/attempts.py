"""Task attempts: each claim of a task, closed once with its outcome."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from psycopg import Connection, sql

from repositories import columns, from_row


@dataclass(frozen=True)
class Attempt:
    """One claim of a task."""

    id: UUID
    task_id: UUID
    attempt: int
    worker_id: str
    trace_id: str
    leased_at: datetime
    finished_at: datetime | None
    outcome: str | None
    error_code: str | None
    error_message: str | None
    # The SHA-256 of the attempt's lease token (sql/0026): who may hear why a call was refused.
    lease_sha256: str | None = None


# What the statements return of an attempt: named, so a new column leaves them be once
# psycopg has prepared them (repositories/__init__.py).
_COLUMNS = columns(Attempt)

_FINISH = (
    sql.SQL("""
        UPDATE task_attempts SET outcome = %(outcome)s, finished_at = now(),
            error_code = %(code)s, error_message = %(message)s
        WHERE task_id = %(id)s AND attempt = %(attempt)s AND outcome IS NULL
        RETURNING {}
        """)
    .format(_COLUMNS)
    .as_string()
)


def finish(
    conn: Connection,
    task_id: UUID,
    attempt: int,
    outcome: str,
    error_code: str | None = None,
    error_message: str | None = None,
) -> Attempt | None:
    """Close an attempt with its outcome (once); return it, or None if it was closed already."""
    row = conn.execute(
        _FINISH,
        {
            "id": task_id,
            "attempt": attempt,
            "outcome": outcome,
            "code": error_code,
            "message": error_message,
        },
    ).fetchone()
    return from_row(Attempt, row) if row else None


_OF_TASKS = (
    sql.SQL("SELECT {} FROM task_attempts WHERE task_id = ANY(%(ids)b) ORDER BY task_id, attempt")
    .format(_COLUMNS)
    .as_string()
)


def of_tasks(conn: Connection, task_ids: Sequence[UUID]) -> list[Attempt]:
    """Attempts of these tasks, oldest first."""
    rows = conn.execute(_OF_TASKS, {"ids": list(task_ids)}).fetchall()
    return [from_row(Attempt, r) for r in rows]


_FIND = (
    sql.SQL("SELECT {} FROM task_attempts WHERE task_id = %(id)s AND attempt = %(attempt)s")
    .format(_COLUMNS)
    .as_string()
)


def find(conn: Connection, task_id: UUID, attempt: int) -> Attempt | None:
    """One attempt of a task."""
    row = conn.execute(_FIND, {"id": task_id, "attempt": attempt}).fetchone()
    return from_row(Attempt, row) if row else None
