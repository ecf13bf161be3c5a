"""Task attempts: each claim of a task, closed once with its outcome."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from psycopg import Connection, sql

from repositories import columns, from_row
from repositories.tasks import Task


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


_FINISH_COMPLETED = (
    sql.SQL("""
        UPDATE task_attempts a SET outcome = 'completed', finished_at = now()
        FROM unnest(%(ids)b::uuid[], %(attempts)b::int[]) AS v(id, attempt)
        -- "= ANY" keeps the lookup on the (task_id, attempt) index whatever the statistics
        -- say: a join alone is hashed over a scan of every attempt when they look few.
        WHERE a.task_id = ANY(%(ids)b::uuid[]) AND a.task_id = v.id AND a.attempt = v.attempt
          AND a.outcome IS NULL
        RETURNING {}
        """)
    .format(columns(Attempt, "a"))
    .as_string()
)


def finish_completed(conn: Connection, tasks: Sequence[Task]) -> dict[UUID, Attempt]:
    """Close the current attempt of each just-completed task; return them by task id."""
    rows = conn.execute(
        _FINISH_COMPLETED,
        {"ids": [t.id for t in tasks], "attempts": [t.attempt for t in tasks]},
        prepare=True,
    ).fetchall()
    return {r["task_id"]: from_row(Attempt, r) for r in rows}


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
