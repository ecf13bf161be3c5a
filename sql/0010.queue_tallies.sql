-- depends: 0009.credential_changes
-- Queue figures that stay fast as history grows. /metrics and GET /api/v1/queue counted every
-- task, job and attempt ever kept: 0.6 s with a million finished tasks, the 3 s statement
-- timeout near ten million. Now the statements that change those counts add their difference
-- here, in the same transaction: one row per figure and label the statement moved. Rows are
-- only ever inserted (one counter row per label would be a lock every completion waits on);
-- the maintenance pass folds them into one row per label, and a read sums what is here.
--   tasks           tasks by workload and status; error_code only for failed ones
--   jobs            jobs by status
--   lease_expiries  attempts whose lease expired
--   retries         failed or expired attempts that a later attempt of the task followed,
--                   by error_code (attempts are numbered 1, 2, ... and deleted with their task)
CREATE TABLE tallies (
    figure      text NOT NULL
                CONSTRAINT tallies_figure_check CHECK
                    (figure IN ('tasks', 'jobs', 'lease_expiries', 'retries')),
    workload    text NOT NULL DEFAULT '',
    status      text NOT NULL DEFAULT '',
    error_code  text NOT NULL DEFAULT '',
    n           bigint NOT NULL
);

-- The code a task is tallied under: its error_code if it failed for good, else none.
CREATE FUNCTION chunkwise_tally_code(status text, error_code text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN status = 'failed' THEN coalesce(error_code, '') ELSE '' END
$$;

-- Tasks change by the hundred a statement, so they are tallied once per statement, from the
-- transition tables PostgreSQL already collects for the announcement triggers of 0006.
-- (A trigger with transition tables has one event, so three triggers share this function.)
CREATE FUNCTION chunkwise_tally_tasks() RETURNS trigger
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

CREATE TRIGGER tasks_tally_inserts
    AFTER INSERT ON tasks REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION chunkwise_tally_tasks();
CREATE TRIGGER tasks_tally_updates
    AFTER UPDATE ON tasks REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION chunkwise_tally_tasks();
CREATE TRIGGER tasks_tally_deletes
    AFTER DELETE ON tasks REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION chunkwise_tally_tasks();

-- Attempts, likewise per statement. A retry is tallied when the attempt after it is opened
-- (by a claim), and taken back when a deleted attempt had been followed.
CREATE FUNCTION chunkwise_tally_attempts() RETURNS trigger
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

CREATE TRIGGER task_attempts_tally_inserts
    AFTER INSERT ON task_attempts REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION chunkwise_tally_attempts();
CREATE TRIGGER task_attempts_tally_updates
    AFTER UPDATE ON task_attempts REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION chunkwise_tally_attempts();
CREATE TRIGGER task_attempts_tally_deletes
    AFTER DELETE ON task_attempts REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION chunkwise_tally_attempts();

-- A job changes status a few times in its life, one row at a time: row triggers, and only
-- when its status is set to something else.
CREATE FUNCTION chunkwise_tally_jobs() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO tallies (figure, status, n) VALUES ('jobs', OLD.status, -1);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO tallies (figure, status, n) VALUES ('jobs', NEW.status, 1);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_tally_inserts_and_deletes
    AFTER INSERT OR DELETE ON jobs
    FOR EACH ROW EXECUTE FUNCTION chunkwise_tally_jobs();
CREATE TRIGGER jobs_tally_status
    AFTER UPDATE OF status ON jobs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION chunkwise_tally_jobs();

-- TRUNCATE (by hand: Chunkwise never truncates) empties a table without a row to tally, so it
-- drops that table's figures; TRUNCATE jobs CASCADE fires this on each table it empties.
CREATE FUNCTION chunkwise_tally_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM tallies WHERE figure = ANY(TG_ARGV);
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_tally_truncate AFTER TRUNCATE ON tasks
    FOR EACH STATEMENT EXECUTE FUNCTION chunkwise_tally_truncate('tasks');
CREATE TRIGGER task_attempts_tally_truncate AFTER TRUNCATE ON task_attempts
    FOR EACH STATEMENT EXECUTE FUNCTION chunkwise_tally_truncate('lease_expiries', 'retries');
CREATE TRIGGER jobs_tally_truncate AFTER TRUNCATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION chunkwise_tally_truncate('jobs');

-- The figures read the unfinished jobs' progress; finished ones are most of the table.
CREATE INDEX jobs_unfinished_idx ON jobs (status) WHERE status IN ('queued', 'running', 'merging');

-- What is already there, counted once. The triggers above lock their tables until this
-- migration commits, so no change falls between the count and the tally.
INSERT INTO tallies (figure, workload, status, error_code, n)
SELECT 'tasks', workload, status, chunkwise_tally_code(status, error_code), count(*)
FROM tasks GROUP BY 2, 3, 4;
INSERT INTO tallies (figure, status, n)
SELECT 'jobs', status, count(*) FROM jobs GROUP BY 2;
INSERT INTO tallies (figure, n)
SELECT 'lease_expiries', count(*) FROM task_attempts WHERE outcome = 'lease_expired'
HAVING count(*) > 0;
INSERT INTO tallies (figure, error_code, n)
SELECT 'retries', coalesce(a.error_code, ''), count(*) FROM task_attempts a
WHERE a.outcome IN ('retried', 'lease_expired')
  AND EXISTS (SELECT FROM task_attempts b WHERE b.task_id = a.task_id AND b.attempt > a.attempt)
GROUP BY 2;
