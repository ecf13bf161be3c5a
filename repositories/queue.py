"""Queue-wide figures in one aggregate read: for operators and for /metrics."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import Connection


@dataclass(frozen=True)
class StateCount:
    """How many chunks of one workload are in one state."""

    workload: str
    state: str
    count: int


@dataclass(frozen=True)
class QueueFigures:
    """A snapshot of the queue."""

    chunks: list[StateCount]
    jobs_by_status: dict[str, int]
    oldest_pending_seconds: float | None
    active_leases: int
    oldest_lease_seconds: float | None
    lease_expiries_total: int
    retries_by_class: dict[str, int]


def figures(conn: Connection) -> QueueFigures:
    """Read the whole snapshot in one round trip."""
    row = conn.execute(
        """
        SELECT
          (SELECT coalesce(json_agg(c), '[]') FROM (
              SELECT workload, status AS state, count(*) AS count FROM tasks
              GROUP BY workload, status ORDER BY workload, status) c) AS chunks,
          (SELECT coalesce(json_object_agg(status, n), '{}') FROM (
              SELECT status, count(*) AS n FROM jobs GROUP BY status) j) AS jobs,
          (SELECT extract(epoch FROM now() - min(created_at)) FROM tasks
              WHERE status = 'pending') AS oldest_pending,
          (SELECT count(*) FROM tasks WHERE status = 'leased') AS active_leases,
          (SELECT extract(epoch FROM now() - min(a.leased_at))
              FROM tasks t JOIN task_attempts a ON a.task_id = t.id AND a.attempt = t.attempt
              WHERE t.status = 'leased') AS oldest_lease,
          (SELECT count(*) FROM task_attempts WHERE outcome = 'lease_expired') AS expiries,
          (SELECT coalesce(json_object_agg(error_code, n), '{}') FROM (
              SELECT error_code, count(*) AS n FROM task_attempts
              WHERE outcome IN ('retried', 'lease_expired') GROUP BY error_code) r) AS retries
        """
    ).fetchone()
    return QueueFigures(
        chunks=[StateCount(**c) for c in row["chunks"]],
        jobs_by_status=row["jobs"],
        oldest_pending_seconds=_float(row["oldest_pending"]),
        active_leases=row["active_leases"],
        oldest_lease_seconds=_float(row["oldest_lease"]),
        lease_expiries_total=row["expiries"],
        retries_by_class=row["retries"],
    )


def _float(value) -> float | None:
    return float(value) if value is not None else None
