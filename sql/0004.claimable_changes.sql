-- depends: 0003.job_changes
-- A task becoming pending (a new job, a retry, an expired lease) or leaving leased (a freed
-- lease slot) announces it on chunkwise_claimable, so a long-polling claim wakes whatever
-- code path made the change. A claim (pending -> leased) says nothing, so one claim does not
-- wake every other waiting one. PostgreSQL folds repeats within a transaction into one.
CREATE FUNCTION chunkwise_announce_claimable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('chunkwise_claimable', '');
    RETURN NULL;
END
$$;

-- A job's tasks arrive in one statement of up to 10,000 rows: announced once per statement.
CREATE FUNCTION chunkwise_announce_new_claimable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM inserted WHERE status = 'pending') THEN
        PERFORM pg_notify('chunkwise_claimable', '');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_announce_new_claimable
    AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT
    EXECUTE FUNCTION chunkwise_announce_new_claimable();

CREATE TRIGGER tasks_announce_claimable_change
    AFTER UPDATE OF status ON tasks
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                       AND (NEW.status = 'pending' OR OLD.status = 'leased'))
    EXECUTE FUNCTION chunkwise_announce_claimable();
