-- The trigger functions as 0006 and 0010 wrote them.
CREATE OR REPLACE FUNCTION chunkwise_announce_task_changes() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('chunkwise_job_changed', changed.job_id::text)
    FROM (SELECT DISTINCT n.job_id FROM new_rows n JOIN old_rows o USING (id)
          WHERE n.status IS DISTINCT FROM o.status) AS changed;
    IF EXISTS (SELECT FROM new_rows n JOIN old_rows o USING (id)
               WHERE n.status IS DISTINCT FROM o.status
                 AND (n.status = 'pending' OR o.status = 'leased')) THEN
        PERFORM pg_notify('chunkwise_claimable', '');
    END IF;
    RETURN NULL;
END
$$;

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
        -- Heartbeats and counters move nothing: only rows whose tallied label changed count.
        WITH labels AS (
            SELECT o.workload,
                   o.status AS was, chunkwise_tally_code(o.status, o.error_code) AS was_code,
                   n.status AS now, chunkwise_tally_code(n.status, n.error_code) AS now_code
            FROM old_rows o JOIN new_rows n USING (id)
        ), moved AS (
            SELECT * FROM labels WHERE (was, was_code) IS DISTINCT FROM (now, now_code)
        )
        INSERT INTO tallies (figure, workload, status, error_code, n)
        SELECT 'tasks', workload, status, error_code, sum(n)
        FROM (SELECT workload, was, was_code, -1 FROM moved
              UNION ALL
              SELECT workload, now, now_code, 1 FROM moved) AS d(workload, status, error_code, n)
        GROUP BY 2, 3, 4
        HAVING sum(n) <> 0;
    END IF;
    RETURN NULL;
END
$$;

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
        FROM old_rows a
        WHERE a.outcome IN ('retried', 'lease_expired')
          AND (EXISTS (SELECT FROM old_rows b
                       WHERE b.task_id = a.task_id AND b.attempt > a.attempt)
               OR EXISTS (SELECT FROM task_attempts b
                          WHERE b.task_id = a.task_id AND b.attempt > a.attempt))
        GROUP BY 2;
    ELSE
        INSERT INTO tallies (figure, n)
        SELECT 'lease_expiries', sum(n)
        FROM (SELECT (n.outcome IS NOT DISTINCT FROM 'lease_expired')::int
                     - (o.outcome IS NOT DISTINCT FROM 'lease_expired')::int
              FROM old_rows o JOIN new_rows n USING (id)) AS d(n)
        HAVING sum(n) <> 0;
    END IF;
    RETURN NULL;
END
$$;
