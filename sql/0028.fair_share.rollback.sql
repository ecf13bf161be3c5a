-- transactional: false
DROP TABLE user_bounds;
CREATE INDEX CONCURRENTLY tasks_unfair_ready_idx
    ON tasks (workload, priority DESC, created_at, job_id, chunk_index)
    WHERE status = 'pending' AND not_before IS NULL;
DROP INDEX CONCURRENTLY tasks_ready_idx;
ALTER INDEX tasks_unfair_ready_idx RENAME TO tasks_ready_idx;
ALTER TABLE tasks DROP COLUMN fair_tag;
