DROP TRIGGER tasks_announce_change ON tasks;
DROP TRIGGER jobs_announce_change ON jobs;
DROP FUNCTION chunkwise_announce_job_change();
