-- depends: 0013.job_listing
-- transactional: false
-- Deleting a job deletes its events (ON DELETE CASCADE), and without an index on job_id each
-- deleted job read the whole outbox: 75 ms a job beside a million events, so a retention pass
-- over a thousand jobs overran the statement timeout and retention stalled for good. Built
-- CONCURRENTLY for the same reason as 0013's indexes; an interrupted build leaves an INVALID
-- index: drop it, then apply.
CREATE INDEX CONCURRENTLY outbox_job_idx ON outbox (job_id);
