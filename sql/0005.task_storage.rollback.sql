ALTER TABLE jobs DROP COLUMN chunks_completed;
DROP INDEX jobs_finished_idx;
DROP INDEX tasks_unfinished_idx;
ALTER TABLE tasks RESET (fillfactor);
CREATE INDEX tasks_leased_idx ON tasks (lease_expires_at) WHERE status = 'leased';
