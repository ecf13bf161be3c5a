-- transactional: false
CREATE INDEX CONCURRENTLY outbox_owner_idx ON outbox (owner_id, id);
DROP INDEX CONCURRENTLY outbox_owner_feed_idx;
DROP INDEX CONCURRENTLY outbox_feed_idx;
ALTER TABLE outbox DROP COLUMN xact;
