-- depends: 0020.job_schedules
-- A manifest job may bound how long one attempt at a task runs: a handler stuck in a loop
-- heartbeats forever and would otherwise hold its lease for good. The job keeps what was
-- asked, for its view; each task a copy, since claims read tasks alone; each claim sets the
-- task's deadline, past which no heartbeat extends the lease and no result or failure is
-- taken. Not indexed, so a heartbeat stays a HOT update (see 0005). Nullable with no default:
-- no table is rewritten.
ALTER TABLE jobs ADD COLUMN timeout_seconds integer
    CONSTRAINT jobs_timeout_seconds_check CHECK (timeout_seconds BETWEEN 1 AND 86400);
ALTER TABLE tasks ADD COLUMN timeout_seconds integer, ADD COLUMN deadline timestamptz;
