-- depends: 0004.claimable_changes
-- Storage that stays fast as history grows.
-- Heartbeats rewrite lease_expires_at every few seconds; with no index on it they are HOT
-- updates (no index entries, room left on the page by the fillfactor). The sweeper finds
-- due leases through the small partial index of leased rows instead.
DROP INDEX tasks_leased_idx;
ALTER TABLE tasks SET (fillfactor = 80);
-- Admission counts a workload's unfinished tasks: read from the unfinished rows only, however
-- many finished ones the table holds.
CREATE INDEX tasks_unfinished_idx ON tasks (workload) WHERE status IN ('pending', 'leased');
-- Retention deletes finished jobs oldest first.
CREATE INDEX jobs_finished_idx ON jobs (completed_at)
    WHERE status IN ('succeeded', 'failed', 'cancelled');
-- Completions count themselves on the job, so "was that the last chunk?" reads one row
-- rather than every task of a 10,000-task job. Tasks never leave completed (a retry
-- re-queues only failed and cancelled ones), so the counter only grows.
ALTER TABLE jobs ADD COLUMN chunks_completed integer NOT NULL DEFAULT 0;
UPDATE jobs j SET chunks_completed = (
    SELECT count(*) FROM tasks t WHERE t.job_id = j.id AND t.status = 'completed');
