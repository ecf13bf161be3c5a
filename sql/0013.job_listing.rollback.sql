-- transactional: false
DROP INDEX CONCURRENTLY jobs_owner_status_created_idx;
DROP INDEX CONCURRENTLY jobs_status_created_idx;
DROP INDEX CONCURRENTLY jobs_labels_idx;
