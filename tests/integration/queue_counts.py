"""The queue's figures counted from the tables themselves: what the tallies must always equal."""

from __future__ import annotations

from dataclasses import asdict

from psycopg import Connection

from repositories import jobs as job_rows
from repositories import queue as queue_rows

# The aggregate read over every row that /metrics made before the tallies (sql/0010).
COUNTED = """
    SELECT
      (SELECT coalesce(json_agg(c), '[]') FROM (
          SELECT workload, status AS state, count(*) AS count FROM tasks
          GROUP BY workload, status ORDER BY workload, status) c) AS chunks,
      (SELECT coalesce(json_object_agg(status, n), '{}') FROM (
          SELECT status, count(*) AS n FROM jobs GROUP BY status) j) AS jobs,
      (SELECT count(*) FROM task_attempts WHERE outcome = 'lease_expired') AS expiries,
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
          FROM jobs j WHERE j.status IN ('queued', 'running', 'merging')) p) AS unfinished,
      (SELECT coalesce(json_agg(t), '[]') FROM (
          SELECT job_id, status, count(*) AS n FROM tasks GROUP BY job_id, status) t) AS by_job
"""


def counted(conn: Connection) -> dict:
    """Each history figure, counted over every row."""
    row = conn.execute(COUNTED).fetchone()
    return {
        "chunks": [(c["workload"], c["state"], c["count"]) for c in row["chunks"]],
        "jobs": row["jobs"],
        "expiries": row["expiries"],
        "retries": row["retries"],
        "failed": row["failed"],
        "unfinished": sorted(
            (p["status"], p["chunks_total"], p["chunks_completed"]) for p in row["unfinished"]
        ),
        "by_job": sorted((str(t["job_id"]), t["status"], t["n"]) for t in row["by_job"]),
    }


def tallied(conn: Connection) -> dict:
    """The same figures as the repository reads them."""
    f = queue_rows.figures(conn)
    return {
        "chunks": [(c.workload, c.state, c.count) for c in f.chunks],
        "jobs": f.jobs_by_status,
        "expiries": f.lease_expiries_total,
        "retries": f.retries_by_code,
        "failed": f.failed_chunks_by_code,
        "unfinished": sorted(
            (p.status, p.chunks_total, p.chunks_completed) for p in f.unfinished_jobs
        ),
        "by_job": sorted(
            (str(job_id), status, n)
            for job_id, counts in job_rows.chunk_counts(conn, _job_ids(conn)).items()
            for status, n in asdict(counts).items()
            if n
        ),
    }


def _job_ids(conn: Connection) -> list:
    return [row["id"] for row in conn.execute("SELECT id FROM jobs").fetchall()]
