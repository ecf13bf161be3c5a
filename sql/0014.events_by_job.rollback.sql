-- transactional: false
DROP INDEX CONCURRENTLY outbox_job_idx;
