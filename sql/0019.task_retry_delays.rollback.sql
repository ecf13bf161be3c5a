-- transactional: false
CREATE INDEX CONCURRENTLY tasks_claim_idx
    ON tasks (workload, priority DESC, created_at, job_id, chunk_index)
    WHERE status = 'pending';
DROP INDEX CONCURRENTLY tasks_waiting_idx;
DROP INDEX CONCURRENTLY tasks_ready_idx;
ALTER TABLE tasks DROP COLUMN not_before;
