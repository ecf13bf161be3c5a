-- transactional: false
DROP INDEX CONCURRENTLY jobs_dependents_idx;
ALTER TABLE jobs DROP COLUMN depends_on;
