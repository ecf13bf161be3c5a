-- transactional: false
DROP INDEX CONCURRENTLY jobs_workload_created_idx;
DROP INDEX CONCURRENTLY jobs_owner_workload_created_idx;
