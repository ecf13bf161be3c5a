-- depends: 0007.claim_index_only
-- Admission's upper bound on each workload's unfinished (pending or leased) tasks, so that
-- admitting a job is one statement rather than a lock, a count of the whole queue and the
-- inserts. A job's admission adds its tasks here in the statement that inserts them, and a
-- retry adds the tasks it re-queues, so the bound is never below the true count. Tasks that
-- finish are not subtracted (every completion of a workload would wait on its one row);
-- when the bound leaves no room, admission counts the queue under the row's lock and starts
-- the bound again from the count.
CREATE TABLE queue_bounds (
    workload   text PRIMARY KEY,
    unfinished bigint NOT NULL CHECK (unfinished >= 0)
);
