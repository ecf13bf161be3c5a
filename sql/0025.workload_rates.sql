-- depends: 0024.workload_pauses
-- A rate-limited workload's claims start at most so many tasks a second (its coordinator's
-- CHUNKWISE_WORKLOAD_RATE_LIMITS), from a bucket of one second's starts that refills as time
-- passes: `tokens` as of `refilled_at`. Claims of the workload take turns (as with lease
-- caps), so each reads the row its predecessor committed; a workload whose claims have never
-- started a task has no row, and its bucket is full.
CREATE TABLE workload_buckets (
    workload     text PRIMARY KEY,
    tokens       double precision NOT NULL,
    refilled_at  timestamptz NOT NULL
);
