-- depends: 0016.job_tallies
-- transactional: false
-- A page of jobs by workload, the owner's or everyone's, newest first. As 0013 found for a
-- status, a workload few jobs have was otherwise found by reading the whole history: at a
-- million finished jobs of another workload, 103 ms for everyone's and 128 ms for one
-- owner's, against 0.05 and 0.03 ms with these (local PostgreSQL 15, EXPLAIN ANALYZE). Built
-- CONCURRENTLY, as 0013's: an interrupted build leaves an INVALID index; drop it, then apply.
CREATE INDEX CONCURRENTLY jobs_workload_created_idx ON jobs (workload, created_at DESC, id DESC);
CREATE INDEX CONCURRENTLY jobs_owner_workload_created_idx
    ON jobs (owner_id, workload, created_at DESC, id DESC);
