DROP TRIGGER tasks_announce_changes ON tasks;
DROP FUNCTION chunkwise_announce_task_changes();

CREATE FUNCTION chunkwise_announce_claimable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('chunkwise_claimable', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_announce_change
    AFTER UPDATE OF status ON tasks
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION chunkwise_announce_job_change('job_id');

CREATE TRIGGER tasks_announce_claimable_change
    AFTER UPDATE OF status ON tasks
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                       AND (NEW.status = 'pending' OR OLD.status = 'leased'))
    EXECUTE FUNCTION chunkwise_announce_claimable();
