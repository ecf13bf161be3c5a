-- depends: 0012.job_attempts
-- transactional: false
-- A page of jobs by status or by label, the owner's or everyone's, newest first: without
-- these, a status or a label few jobs have was found by reading the owner's whole history,
-- or everyone's (110-140 ms at a million jobs, and growing with them). Built CONCURRENTLY,
-- outside a transaction, so that admissions and status changes go on while a large jobs
-- table is indexed. A build that is interrupted leaves an INVALID index: drop it, then apply.
CREATE INDEX CONCURRENTLY jobs_owner_status_created_idx
    ON jobs (owner_id, status, created_at DESC, id DESC);
CREATE INDEX CONCURRENTLY jobs_status_created_idx ON jobs (status, created_at DESC, id DESC);
CREATE INDEX CONCURRENTLY jobs_labels_idx ON jobs USING gin (labels jsonb_path_ops);
