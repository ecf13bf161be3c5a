"""The SQL invariants every round must leave true, each a query that lists what breaks it."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg.rows import dict_row

APPLICATION_NAME = "chunkwise-reliability"


@dataclass(frozen=True)
class Invariant:
    """A rule, and a query returning the rows that break it (none when it holds)."""

    name: str
    rule: str
    violations_sql: str


INVARIANTS = (
    Invariant(
        "one_summary_per_chunk",
        "at most one accepted summary per chunk",
        """SELECT job_id::text, chunk_index, count(*) AS summaries
             FROM chunk_summaries GROUP BY job_id, chunk_index HAVING count(*) > 1""",
    ),
    Invariant(
        "succeeded_job_has_finished_chunks",
        "no succeeded job with an unfinished chunk",
        """SELECT j.id::text AS job_id, t.chunk_index, t.status
             FROM jobs j JOIN tasks t ON t.job_id = j.id
            WHERE j.status = 'succeeded' AND t.status <> 'completed'""",
    ),
    Invariant(
        "attempts_within_budget",
        "no task attempted more often than its max_attempts",
        """SELECT t.id::text AS task_id, t.attempt, t.max_attempts,
                  (SELECT count(*) FROM task_attempts a WHERE a.task_id = t.id) AS claims
             FROM tasks t
            WHERE t.attempt > t.max_attempts
               OR (SELECT count(*) FROM task_attempts a WHERE a.task_id = t.id) > t.max_attempts""",
    ),
    Invariant(
        "leased_task_has_owner",
        "no leased task without an owner and a lease expiry",
        """SELECT id::text AS task_id, lease_owner, lease_expires_at::text
             FROM tasks
            WHERE status = 'leased' AND (lease_owner IS NULL OR lease_expires_at IS NULL)""",
    ),
    Invariant(
        "tallies_equal_counts",
        "every queue figure tallied (sql/0010) equals the same figure counted over the rows",
        # The counts are the migration's own backfill of the tallies, label for label.
        """WITH tallied AS (
               SELECT figure, workload, status, error_code, sum(n) AS n FROM tallies
               GROUP BY 1, 2, 3, 4 HAVING sum(n) <> 0
           ), counted AS (
               SELECT 'tasks' AS figure, workload, status,
                      chunkwise_tally_code(status, error_code) AS error_code, count(*) AS n
                 FROM tasks GROUP BY 2, 3, 4
               UNION ALL
               SELECT 'jobs', '', status, '', count(*) FROM jobs GROUP BY 3
               UNION ALL
               SELECT 'lease_expiries', '', '', '', count(*) FROM task_attempts
                WHERE outcome = 'lease_expired' HAVING count(*) > 0
               UNION ALL
               SELECT 'retries', '', '', coalesce(a.error_code, ''), count(*)
                 FROM task_attempts a
                WHERE a.outcome IN ('retried', 'lease_expired')
                  AND EXISTS (SELECT FROM task_attempts b
                              WHERE b.task_id = a.task_id AND b.attempt > a.attempt)
                GROUP BY 4
           )
           SELECT figure, workload, status, error_code,
                  coalesce(t.n, 0) AS tallied, coalesce(c.n, 0) AS counted
             FROM tallied t FULL JOIN counted c USING (figure, workload, status, error_code)
            WHERE t.n IS DISTINCT FROM c.n""",
    ),
    Invariant(
        "no_job_waits_for_a_failed_one",
        "no queued or running job depends on a failed or cancelled job (sql/0023)",
        """SELECT j.id::text AS job_id, p.id::text AS prerequisite, p.status
             FROM jobs j JOIN jobs p ON p.id = ANY(j.depends_on)
            WHERE j.depends_on IS NOT NULL AND j.status IN ('queued', 'running')
              AND p.status IN ('failed', 'cancelled')""",
    ),
    Invariant(
        "no_task_waits_for_good",
        "no task waits for the jobs its job depends on once they have all succeeded",
        # 9999-12-31 is repositories.tasks.BLOCKED; a retention-deleted job counts as done.
        """SELECT t.id::text AS task_id, t.job_id::text
             FROM tasks t JOIN jobs j ON j.id = t.job_id
            WHERE t.status = 'pending' AND t.not_before = '9999-12-31 00:00:00+00'
              AND NOT EXISTS (SELECT FROM jobs p
                              WHERE p.id = ANY(j.depends_on) AND p.status <> 'succeeded')""",
    ),
    Invariant(
        "job_tallies_equal_counts",
        "every job's tasks by status, tallied (sql/0016), equal the same counted over its tasks",
        """WITH tallied AS (
               SELECT job_id, status, sum(n) AS n FROM job_tallies
               GROUP BY 1, 2 HAVING sum(n) <> 0
           ), counted AS (
               SELECT job_id, status, count(*) AS n FROM tasks GROUP BY 1, 2
           )
           SELECT job_id::text, status, coalesce(t.n, 0) AS tallied, coalesce(c.n, 0) AS counted
             FROM tallied t FULL JOIN counted c USING (job_id, status)
            WHERE t.n IS DISTINCT FROM c.n""",
    ),
)


def violations(conn: psycopg.Connection) -> dict[str, list[dict]]:
    """Every invariant's breaking rows, by name; only broken invariants are keys."""
    found = {}
    for invariant in INVARIANTS:
        with conn.cursor(row_factory=dict_row) as cursor:
            rows = cursor.execute(invariant.violations_sql).fetchall()
        if rows:
            found[invariant.name] = rows
    return found


def check(database_url: str) -> dict[str, list[dict]]:
    """violations() on a connection of its own, so a restarted server is no obstacle."""
    with psycopg.connect(
        database_url, autocommit=True, application_name=APPLICATION_NAME, connect_timeout=10
    ) as conn:
        return violations(conn)
