-- depends: 0014.events_by_job
-- The statement triggers of 0006 and 0010 no longer join their transition tables. PL/pgSQL
-- keeps each query's plan for the connection's life, planned for the transition tables it
-- first saw: on a pooled connection that is a heartbeat's one row, and the nested loop made
-- for it then ran a 10,000-task cancel in quadratic time (over a minute, so the statement
-- timeout refused it every time; a task failing for good in such a job, and the lease sweep
-- that failed one, likewise). What each function computes is unchanged; each now reads its
-- tables with set operations and aggregates, whose every plan is linear or n log n.

-- A task changed status when (id, job_id, status) is in the new rows and not the old ones; it
-- became pending, or left leased, likewise for those rows alone.
CREATE OR REPLACE FUNCTION chunkwise_announce_task_changes() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('chunkwise_job_changed', changed.job_id::text)
    FROM (SELECT job_id
          FROM (SELECT id, job_id, status FROM new_rows
                EXCEPT SELECT id, job_id, status FROM old_rows) AS moved
          GROUP BY job_id) AS changed;
    IF EXISTS (SELECT id FROM new_rows WHERE status = 'pending'
               EXCEPT SELECT id FROM old_rows WHERE status = 'pending')
       OR EXISTS (SELECT id FROM old_rows WHERE status = 'leased'
                  EXCEPT SELECT id FROM new_rows WHERE status = 'leased') THEN
        PERFORM pg_notify('chunkwise_claimable', '');
    END IF;
    RETURN NULL;
END
$$;

-- An update moves each row from its old label to its new one: the new rows counted up and the
-- old ones down give the same sums as pairing them, and rows that kept their label cancel out.
CREATE OR REPLACE FUNCTION chunkwise_tally_tasks() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO tallies (figure, workload, status, error_code, n)
        SELECT 'tasks', workload, status, chunkwise_tally_code(status, error_code), count(*)
        FROM new_rows GROUP BY 2, 3, 4;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO tallies (figure, workload, status, error_code, n)
        SELECT 'tasks', workload, status, chunkwise_tally_code(status, error_code), -count(*)
        FROM old_rows GROUP BY 2, 3, 4;
    ELSE
        INSERT INTO tallies (figure, workload, status, error_code, n)
        SELECT 'tasks', workload, status, error_code, sum(n)
        FROM (SELECT workload, status, chunkwise_tally_code(status, error_code), 1
              FROM new_rows
              UNION ALL
              SELECT workload, status, chunkwise_tally_code(status, error_code), -1
              FROM old_rows) AS d(workload, status, error_code, n)
        GROUP BY 2, 3, 4
        HAVING sum(n) <> 0;
    END IF;
    RETURN NULL;
END
$$;

-- Attempts likewise; a deleted retry was followed when a later attempt of its task is among
-- the deleted rows (a window over them, not a join) or still in the table.
CREATE OR REPLACE FUNCTION chunkwise_tally_attempts() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO tallies (figure, error_code, n)
        SELECT 'retries', coalesce(p.error_code, ''), count(*)
        FROM new_rows a
        -- LATERAL: one index lookup per new attempt, whatever the planner guesses of new_rows.
        CROSS JOIN LATERAL (
            SELECT error_code FROM task_attempts p
            WHERE p.task_id = a.task_id AND p.attempt = a.attempt - 1
              AND p.outcome IN ('retried', 'lease_expired')) AS p
        WHERE a.attempt > 1
        GROUP BY 2;
    ELSIF TG_OP = 'DELETE' THEN
        -- Retention deletes a task's attempts in a statement of their own (the foreign key's
        -- cascade), so this runs once per task deleted: most had no failed attempt.
        IF NOT EXISTS (SELECT FROM old_rows WHERE outcome IN ('retried', 'lease_expired')) THEN
            RETURN NULL;
        END IF;
        INSERT INTO tallies (figure, n)
        SELECT 'lease_expiries', -count(*) FROM old_rows WHERE outcome = 'lease_expired'
        HAVING count(*) > 0;
        INSERT INTO tallies (figure, error_code, n)
        SELECT 'retries', coalesce(a.error_code, ''), -count(*)
        FROM (SELECT task_id, attempt, outcome, error_code,
                     max(attempt) OVER (PARTITION BY task_id) AS last_deleted
              FROM old_rows) AS a
        WHERE a.outcome IN ('retried', 'lease_expired')
          AND (a.attempt < a.last_deleted
               OR EXISTS (SELECT FROM task_attempts b
                          WHERE b.task_id = a.task_id AND b.attempt > a.attempt))
        GROUP BY 2;
    ELSE
        INSERT INTO tallies (figure, n)
        SELECT 'lease_expiries', sum(n)
        FROM (SELECT (outcome IS NOT DISTINCT FROM 'lease_expired')::int FROM new_rows
              UNION ALL
              SELECT -(outcome IS NOT DISTINCT FROM 'lease_expired')::int FROM old_rows)
             AS d(n)
        HAVING sum(n) <> 0;
    END IF;
    RETURN NULL;
END
$$;
