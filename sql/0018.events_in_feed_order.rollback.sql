-- transactional: false
CREATE INDEX CONCURRENTLY outbox_owner_idx ON outbox (owner_id, id);
CREATE INDEX CONCURRENTLY outbox_job_idx ON outbox (job_id);
DROP INDEX CONCURRENTLY outbox_job_feed_idx;
DROP INDEX CONCURRENTLY outbox_owner_feed_idx;
DROP INDEX CONCURRENTLY outbox_feed_idx;
ALTER TABLE outbox DROP COLUMN xact;
