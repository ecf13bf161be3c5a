DROP TABLE task_results;
ALTER TABLE tasks DROP COLUMN args;
