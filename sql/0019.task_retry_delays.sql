-- depends: 0018.events_in_feed_order
-- transactional: false
-- A retryable failure went back to the queue at once, so a task whose dependency was down
-- for a minute spent every attempt in milliseconds. A task re-queued after a failure now waits
-- until not_before (exponential backoff, or the worker's own retry_after_seconds). NULL, for
-- every task already here, is claimable now; nullable with no default, the table is not
-- rewritten.
--
-- Claims must not read past the waiting tasks: with the claim index over every pending task,
-- a claim of 10 took 1.4 ms with none waiting and 3.6 / 31 ms with 10,000 / 100,000 waiting
-- at the head of the queue (local PostgreSQL 15), an upstream's outage being exactly when that
-- many wait. So the pending tasks are indexed in two halves: the ready ones in claim order,
-- and the waiting ones by the time their wait ends, which a claim reads from its start.
-- Built CONCURRENTLY, as 0013's: an interrupted build leaves an INVALID index; drop it, then
-- apply.
ALTER TABLE tasks ADD COLUMN not_before timestamptz;
CREATE INDEX CONCURRENTLY tasks_ready_idx
    ON tasks (workload, priority DESC, created_at, job_id, chunk_index)
    WHERE status = 'pending' AND not_before IS NULL;
CREATE INDEX CONCURRENTLY tasks_waiting_idx ON tasks (workload, not_before)
    WHERE status = 'pending' AND not_before IS NOT NULL;
DROP INDEX CONCURRENTLY tasks_claim_idx;
