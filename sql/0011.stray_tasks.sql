-- depends: 0010.queue_tallies
-- A job that fails cancels its unfinished tasks with SKIP LOCKED: it holds the job's lock, and
-- a batch of results holding some of those tasks waits for that lock next. The tasks another
-- transaction held at that moment (a claim that had no room to lease them, a heartbeat batch,
-- a failure re-queueing its own) are left behind; the job is marked, and the maintenance pass
-- cancels them once they are free, then clears the mark.
ALTER TABLE jobs ADD COLUMN stray_tasks boolean NOT NULL DEFAULT false;
CREATE INDEX jobs_stray_tasks_idx ON jobs (id) WHERE stray_tasks;
