-- depends: 0019.task_retry_delays
-- A manifest job may be scheduled: its tasks are admitted now, counted against the queue's
-- cap as any queued task is, and wait in tasks_waiting_idx (0019) until the job's
-- not_before. The job keeps what was asked, for its view. Nullable with no default: the
-- table is not rewritten.
ALTER TABLE jobs ADD COLUMN not_before timestamptz;
