-- depends: 0005.task_storage
-- A task's change of status is announced once per statement, not once per row: a claim or a
-- batch of results changes hundreds of rows at a time, and the row triggers of 0003 and 0004
-- made a PL/pgSQL call for each (serialising the whole row to JSON to read its job id).
-- A trigger with transition tables cannot name columns, so this one sees every UPDATE of
-- tasks, heartbeats included, and picks the changes of status out itself. What it announces
-- is unchanged: each job whose task changed status, and "claimable" when a task became
-- pending or left leased.
DROP TRIGGER tasks_announce_change ON tasks;
DROP TRIGGER tasks_announce_claimable_change ON tasks;
DROP FUNCTION chunkwise_announce_claimable();

CREATE FUNCTION chunkwise_announce_task_changes() RETURNS trigger
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

CREATE TRIGGER tasks_announce_changes
    AFTER UPDATE ON tasks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION chunkwise_announce_task_changes();
