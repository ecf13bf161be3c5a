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
class JobProgress:
    """How far an unfinished job is."""

    status: str
    chunks_completed: int
    chunks_total: int


@dataclass(frozen=True)
class QueueFigures:
    """A snapshot of the queue."""

    chunks: list[StateCount]
    jobs_by_status: dict[str, int]
    oldest_pending_seconds: float | None
    active_leases: int
    oldest_lease_seconds: float | None
    lease_expiries_total: int
    retries_by_code: dict[str, int]
    failed_chunks_by_code: dict[str, int]
    unfinished_jobs: list[JobProgress]


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
          -- A retry is a failed attempt that a later attempt of the same task followed.
          (SELECT coalesce(json_object_agg(error_code, n), '{}') FROM (
              SELECT a.error_code, count(*) AS n FROM task_attempts a
              WHERE a.outcome IN ('retried', 'lease_expired')
                AND EXISTS (SELECT 1 FROM task_attempts b
                            WHERE b.task_id = a.task_id AND b.attempt > a.attempt)
              GROUP BY a.error_code) r) AS retries,
          (SELECT coalesce(json_object_agg(error_code, n), '{}') FROM (
              SELECT error_code, count(*) AS n FROM tasks WHERE status = 'failed'
              GROUP BY error_code) f) AS failed,
          (SELECT coalesce(json_agg(p), '[]') FROM (
              SELECT j.status, j.chunks_total,
                     (SELECT count(*) FROM tasks t
                      WHERE t.job_id = j.id AND t.status = 'completed') AS chunks_completed
              FROM jobs j WHERE j.status IN ('queued', 'running', 'merging')) p) AS unfinished
        """
    ).fetchone()
    return QueueFigures(
        chunks=[StateCount(**c) for c in row["chunks"]],
        jobs_by_status=row["jobs"],
        oldest_pending_seconds=_float(row["oldest_pending"]),
        active_leases=row["active_leases"],
        oldest_lease_seconds=_float(row["oldest_lease"]),
        lease_expiries_total=row["expiries"],
        retries_by_code=row["retries"],
        failed_chunks_by_code=row["failed"],
        unfinished_jobs=[JobProgress(**p) for p in row["unfinished"]],
    )


def _float(value) -> float | None:
    return float(value) if value is not None else None
