DROP TRIGGER tasks_job_tally_truncate ON tasks;
DROP TRIGGER tasks_job_tally_deletes ON tasks;
DROP TRIGGER tasks_job_tally_updates ON tasks;
DROP TRIGGER tasks_job_tally_inserts ON tasks;
DROP FUNCTION chunkwise_tally_job_tasks_truncate();
DROP FUNCTION chunkwise_tally_job_tasks();
DROP TABLE job_tallies;
