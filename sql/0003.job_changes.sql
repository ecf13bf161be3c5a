-- depends: 0002.csv_jobs
-- Every change a job's view shows (its row's revision, a task's status) announces the job's
-- id on chunkwise_job_changed, so a waiting GET /api/v1/jobs/{id} answers at once. One place,
-- whatever code path made the change; PostgreSQL folds repeats within one transaction.
CREATE FUNCTION chunkwise_announce_job_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('chunkwise_job_changed', to_jsonb(NEW) ->> TG_ARGV[0]);
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_announce_change
    AFTER UPDATE OF revision ON jobs
    FOR EACH ROW WHEN (OLD.revision IS DISTINCT FROM NEW.revision)
    EXECUTE FUNCTION chunkwise_announce_job_change('id');

CREATE TRIGGER tasks_announce_change
    AFTER UPDATE OF status ON tasks
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION chunkwise_announce_job_change('job_id');
