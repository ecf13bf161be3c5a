DROP INDEX jobs_stray_tasks_idx;
ALTER TABLE jobs DROP COLUMN stray_tasks;
