"""Queue-wide figures for operators and /metrics, the tallies that keep them cheap, and pauses."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg import Connection, sql

from repositories import channels, columns, from_row


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
class ScheduleFigures:
    """Every user's schedules (sql/0022): how many, and whether their runs keep up."""

    active: int
    paused: int
    # Whose last run submitted no job (queue_full, or refused for good).
    failing: int
    # How far behind its time the most overdue active schedule's run is (None: none is).
    lag_seconds: float | None


@dataclass(frozen=True)
class WorkloadPause:
    """A paused workload (sql/0024): who paused it, and when."""

    workload: str
    paused_by: str
    paused_at: datetime


# What the statements return of a pause: named, so a new column leaves them be once psycopg
# has prepared them (repositories/__init__.py).
_PAUSE_COLUMNS = columns(WorkloadPause)


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
    # Pending tasks not yet claimable: waiting out a retry delay or their job's schedule.
    waiting_by_workload: dict[str, int]
    schedules: ScheduleFigures
    paused: list[WorkloadPause]


def figures(conn: Connection) -> QueueFigures:
    """Read the whole snapshot in one round trip.

    Counts over history come from the tallies (sql/0010), never from the history itself, so
    the read costs the same with a million finished tasks as with none.
    """
    row = conn.execute(
        """
        WITH t AS (
            SELECT figure, workload, status, error_code, sum(n)::bigint AS n FROM tallies
            GROUP BY figure, workload, status, error_code HAVING sum(n) <> 0
        )
        SELECT
          (SELECT coalesce(json_agg(c), '[]') FROM (
              SELECT workload, status AS state, sum(n)::bigint AS count FROM t
              WHERE figure = 'tasks' GROUP BY workload, status ORDER BY workload, status) c)
              AS chunks,
          (SELECT coalesce(json_object_agg(status, n), '{}') FROM t WHERE figure = 'jobs')
              AS jobs,
          -- How long a claimable task has waited for a worker: a ready one since it was
          -- created, one whose retry wait or schedule has ended since that ended; a task
          -- still waiting, or of a paused workload, is not late. Each half reads its own
          -- partial index (sql/0019).
          (SELECT extract(epoch FROM now() - least(
              (SELECT min(created_at) FROM tasks
               WHERE status = 'pending' AND not_before IS NULL
                 AND workload NOT IN (SELECT workload FROM workload_pauses)),
              (SELECT min(not_before) FROM tasks
               WHERE status = 'pending' AND not_before <= now()
                 AND workload NOT IN (SELECT workload FROM workload_pauses))))) AS oldest_pending,
          (SELECT count(*) FROM tasks WHERE status = 'leased') AS active_leases,
          (SELECT extract(epoch FROM now() - min(a.leased_at))
              FROM tasks t JOIN task_attempts a ON a.task_id = t.id AND a.attempt = t.attempt
              WHERE t.status = 'leased') AS oldest_lease,
          (SELECT coalesce(sum(n), 0)::bigint FROM t WHERE figure = 'lease_expiries')
              AS expiries,
          (SELECT coalesce(json_object_agg(error_code, n), '{}') FROM t
              WHERE figure = 'retries') AS retries,
          (SELECT coalesce(json_object_agg(error_code, n), '{}') FROM (
              SELECT error_code, sum(n)::bigint AS n FROM t
              WHERE figure = 'tasks' AND status = 'failed' GROUP BY error_code) f) AS failed,
          (SELECT coalesce(json_agg(p), '[]') FROM (
              SELECT status, chunks_total, chunks_completed FROM jobs
              WHERE status IN ('queued', 'running', 'merging')) p) AS unfinished,
          -- Counted from tasks_waiting_idx (sql/0019): as many rows as are waiting.
          (SELECT coalesce(json_object_agg(workload, n), '{}') FROM (
              SELECT workload, count(*) AS n FROM tasks
              WHERE status = 'pending' AND not_before > now() GROUP BY workload) w) AS waiting,
          -- A user has at most CHUNKWISE_USER_MAX_SCHEDULES: counted from the table itself.
          (SELECT json_build_object(
              'active', count(*) FILTER (WHERE NOT paused),
              'paused', count(*) FILTER (WHERE paused),
              'failing', count(*) FILTER (WHERE last_error IS NOT NULL),
              'lag_seconds', extract(epoch FROM now() - min(next_run_at)
                                     FILTER (WHERE NOT paused AND next_run_at < now())))
           FROM schedules) AS schedules,
          (SELECT coalesce(json_agg(p ORDER BY p.workload), '[]') FROM workload_pauses p)
              AS paused
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
        waiting_by_workload=row["waiting"],
        schedules=ScheduleFigures(**row["schedules"]),
        paused=[
            WorkloadPause(p["workload"], p["paused_by"], datetime.fromisoformat(p["paused_at"]))
            for p in row["paused"]
        ],
    )


_PAUSE = (
    sql.SQL("""
        INSERT INTO workload_pauses (workload, paused_by) VALUES (%(workload)s, %(by)s)
        ON CONFLICT (workload) DO UPDATE SET workload = EXCLUDED.workload
        RETURNING {}
        """)
    .format(_PAUSE_COLUMNS)
    .as_string()
)


def pause(conn: Connection, workload: str, paused_by: str) -> WorkloadPause:
    """Pause a workload; a paused one keeps who paused it first, and when."""
    row = conn.execute(_PAUSE, {"workload": workload, "by": paused_by}).fetchone()
    return from_row(WorkloadPause, row)


def resume(conn: Connection, workload: str) -> None:
    """Resume a paused workload, waking waiting claims when the caller commits."""
    resumed = conn.execute(
        "DELETE FROM workload_pauses WHERE workload = %(workload)s", {"workload": workload}
    ).rowcount
    if resumed:
        conn.execute("SELECT pg_notify(%s, '')", (channels.CLAIMABLE,))


_PAUSES = (
    sql.SQL("SELECT {} FROM workload_pauses ORDER BY workload").format(_PAUSE_COLUMNS).as_string()
)


def pauses(conn: Connection) -> list[WorkloadPause]:
    """Every paused workload's pause."""
    rows = conn.execute(_PAUSES).fetchall()
    return [from_row(WorkloadPause, r) for r in rows]


def fold_tallies(conn: Connection, limit: int = 200_000) -> None:
    """Fold up to `limit` tally rows into one row per figure and label.

    A fold never changes a sum: rows inserted while it runs are not in its snapshot and stay,
    and a concurrent fold skips the rows this one deleted. The limit keeps one fold within the
    statement timeout however far behind the folding is (a bulk load, say); the next pass goes
    on from there.
    """
    conn.execute(
        """
        WITH folded AS (
            DELETE FROM tallies
            WHERE ctid = ANY (ARRAY(SELECT ctid FROM tallies LIMIT %(limit)s))
            RETURNING figure, workload, status, error_code, n
        )
        INSERT INTO tallies (figure, workload, status, error_code, n)
        SELECT figure, workload, status, error_code, sum(n) FROM folded
        GROUP BY figure, workload, status, error_code HAVING sum(n) <> 0
        """,
        {"limit": limit},
    )


def _float(value) -> float | None:
    return float(value) if value is not None else None
