-- depends: 0015.linear_triggers
-- A job's own figures (its tasks by status, on every job view and listing) without counting
-- its tasks. They were counted on every read: 6-8 ms for a job of 10,000 tasks, and 84 ms for
-- a page of 50 jobs of which five were unfinished, since the planner then read the whole tasks
-- table. As with the queue's tallies (0010), the statements that change tasks add their
-- difference here, in the same transaction, a row per job and status they moved; rows are
-- only ever inserted (a counter row per job would be a lock its completions queue on), the
-- maintenance pass folds them, and a read sums what is left. No foreign key: a deleted job's
-- tasks add their own negative rows, which the fold then drops with the zeros they sum to.
CREATE TABLE job_tallies (
    job_id  uuid NOT NULL,
    status  text NOT NULL,
    n       bigint NOT NULL
);
CREATE INDEX job_tallies_job_idx ON job_tallies (job_id);

-- Set operations only, as 0015 explains: linear whatever plan PL/pgSQL keeps.
CREATE FUNCTION chunkwise_tally_job_tasks() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_tallies (job_id, status, n)
        SELECT job_id, status, count(*) FROM new_rows GROUP BY 1, 2;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO job_tallies (job_id, status, n)
        SELECT job_id, status, -count(*) FROM old_rows GROUP BY 1, 2;
    ELSE
        -- Heartbeats and counters move nothing: rows that kept their status cancel out.
        INSERT INTO job_tallies (job_id, status, n)
        SELECT job_id, status, sum(n)
        FROM (SELECT job_id, status, 1 FROM new_rows
              UNION ALL
              SELECT job_id, status, -1 FROM old_rows) AS d(job_id, status, n)
        GROUP BY 1, 2
        HAVING sum(n) <> 0;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_job_tally_inserts
    AFTER INSERT ON tasks REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION chunkwise_tally_job_tasks();
CREATE TRIGGER tasks_job_tally_updates
    AFTER UPDATE ON tasks REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION chunkwise_tally_job_tasks();
CREATE TRIGGER tasks_job_tally_deletes
    AFTER DELETE ON tasks REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION chunkwise_tally_job_tasks();

-- TRUNCATE (by hand: Chunkwise never truncates) leaves no rows to tally.
CREATE FUNCTION chunkwise_tally_job_tasks_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_tallies;
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_job_tally_truncate AFTER TRUNCATE ON tasks
    FOR EACH STATEMENT EXECUTE FUNCTION chunkwise_tally_job_tasks_truncate();

-- What is already there, counted once. The triggers above lock the tasks table until this
-- migration commits, so no change falls between the count and the tally (500,000 tasks took
-- under half a second here; writers wait that long).
INSERT INTO job_tallies (job_id, status, n)
SELECT job_id, status, count(*) FROM tasks GROUP BY 1, 2;
