-- depends: 0017.job_workload_listing
-- transactional: false
-- The event feed read `id > after`, but an id is drawn when an event is written, not when its
-- transaction commits: a feed read between a later id's commit and an earlier one's moved past
-- the earlier event for good. Each event now carries its transaction's id, and the feed reads
-- in (xact, id) order only events older than every transaction still running (its snapshot's
-- xmin): whatever commits later has a larger xact, so it sorts after every page already read.
-- Events written before this migration keep xact 0, as they are all committed. The feed is
-- read whole, by owner or by job, so each way in gets an index in that order; the job's also
-- serves deleting a job (0014). The fast default leaves the table unrewritten; the indexes are
-- built CONCURRENTLY, as 0013's: an interrupted build leaves an INVALID index; drop it, then
-- apply.
ALTER TABLE outbox ADD COLUMN xact xid8 NOT NULL DEFAULT '0';
ALTER TABLE outbox ALTER COLUMN xact SET DEFAULT pg_current_xact_id();
CREATE INDEX CONCURRENTLY outbox_feed_idx ON outbox (xact, id);
CREATE INDEX CONCURRENTLY outbox_owner_feed_idx ON outbox (owner_id, xact, id);
CREATE INDEX CONCURRENTLY outbox_job_feed_idx ON outbox (job_id, xact, id);
DROP INDEX CONCURRENTLY outbox_owner_idx;
DROP INDEX CONCURRENTLY outbox_job_idx;
