"""Workers as the coordinator has seen them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg import Connection

from repositories import from_row


@dataclass(frozen=True)
class Worker:
    """A worker row with the leases it holds now."""

    id: str
    first_seen_at: datetime
    last_seen_at: datetime
    capacity: int
    workloads: list[str]
    tasks_done: int
    peak_rss_bytes: int | None
    leases_held: int
    # By the database's clock, which stamped last_seen_at: a host's own clock may be off.
    seen_seconds_ago: float


def touch(conn: Connection, worker_id: str) -> None:
    """Record that the worker was seen now (its claims record what it can do)."""
    conn.execute(
        "UPDATE workers SET last_seen_at = now() WHERE id = %(id)s", {"id": worker_id}, prepare=True
    )


def record_tasks_done(
    conn: Connection, worker_id: str, count: int, peak_rss_bytes: int | None
) -> None:
    """Count completed tasks and keep the highest memory peak the worker reported."""
    conn.execute(
        """
        UPDATE workers SET tasks_done = tasks_done + %(count)s, last_seen_at = now(),
            peak_rss_bytes = GREATEST(peak_rss_bytes, %(rss)s)
        WHERE id = %(id)s
        """,
        {"id": worker_id, "count": count, "rss": peak_rss_bytes},
        prepare=True,
    )


def list_workers(conn: Connection) -> list[Worker]:
    """Every known worker, most recently seen first, with its current lease count."""
    rows = conn.execute(
        """
        SELECT w.id, w.first_seen_at, w.last_seen_at, w.capacity, w.workloads, w.tasks_done,
               w.peak_rss_bytes, count(t.id) AS leases_held,
               extract(epoch FROM clock_timestamp() - w.last_seen_at)::float8 AS seen_seconds_ago
        FROM workers w LEFT JOIN tasks t ON t.lease_owner = w.id AND t.status = 'leased'
        GROUP BY w.id ORDER BY w.last_seen_at DESC
        """
    ).fetchall()
    return [from_row(Worker, r) for r in rows]


def delete_idle_workers(conn: Connection, idle_seconds: int) -> list[str]:
    """Delete the workers unseen for idle_seconds that hold no lease; return their ids."""
    # A claim touching the row meanwhile moves last_seen_at on; READ COMMITTED re-checks the
    # WHERE on that newer row, so a worker that just came back is not deleted under it.
    rows = conn.execute(
        """
        DELETE FROM workers w
        WHERE w.last_seen_at < now() - make_interval(secs => %(idle)s)
          AND NOT EXISTS (
              SELECT 1 FROM tasks t WHERE t.lease_owner = w.id AND t.status = 'leased'
          )
        RETURNING w.id
        """,
        {"idle": idle_seconds},
    ).fetchall()
    return [r["id"] for r in rows]


def bound_elsewhere(conn: Connection, worker_id: str, credential_id: int) -> bool:
    """Whether the worker id is bound to another worker credential than this one (sql/0026)."""
    row = conn.execute(
        "SELECT credential_id <> %(credential)s AS elsewhere FROM workers WHERE id = %(id)s",
        {"id": worker_id, "credential": credential_id},
    ).fetchone()
    return bool(row and row["elsewhere"])
