-- depends: 0027.ui_sessions
-- transactional: false
-- One user could starve the rest: four big CSV jobs filled csv_stats's whole queue, and a
-- user's 10,000 queued tasks were all claimed before another's job, submitted after, began.
--
-- Fair claims: each task carries a fair_tag, its owner's next number in the workload's
-- virtual time (start-time fair queuing). Admission numbers a job's tasks from the later of
-- the owner's last tag and the tag of the workload's head at the job's priority, so a user
-- who arrives behind a 10,000-task backlog interleaves with it, task for task (a retry
-- numbers the tasks it re-queues the same way, and an owner's line reaches at most its share
-- past the head). Claims read the ready tasks in (priority, fair_tag, created_at) order:
-- one index scan, as before.
-- The default 0, for every task already here, keeps their old order ahead of new ones; a
-- constant default does not rewrite the table.
ALTER TABLE tasks ADD COLUMN fair_tag bigint NOT NULL DEFAULT 0;
-- Built CONCURRENTLY, as 0019's: an interrupted build leaves an INVALID index; drop it, then
-- apply.
CREATE INDEX CONCURRENTLY tasks_fair_ready_idx
    ON tasks (workload, priority DESC, fair_tag, created_at, job_id, chunk_index)
    WHERE status = 'pending' AND not_before IS NULL;
DROP INDEX CONCURRENTLY tasks_ready_idx;
ALTER INDEX tasks_fair_ready_idx RENAME TO tasks_ready_idx;

-- Per-user quotas, kept as queue_bounds keeps the workload's (sql/0008): upper bounds of an
-- owner's unfinished tasks in a workload and of the bytes of parameters and labels its
-- unfinished jobs store, that admission raises in the statement that inserts the job and a
-- retry raises by what it re-queues. When a bound leaves no room, admission counts again
-- under the row's lock. last_tag is the owner's last fair_tag in the workload.
CREATE TABLE user_bounds (
    workload      text NOT NULL,
    owner_id      bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    unfinished    bigint NOT NULL CHECK (unfinished >= 0),
    stored_bytes  bigint NOT NULL CHECK (stored_bytes >= 0),
    last_tag      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (workload, owner_id)
);
