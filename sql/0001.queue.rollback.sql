DROP TABLE audit_log;
DROP TABLE outbox;
DROP TABLE workers;
DROP TABLE task_attempts;
DROP TABLE tasks;
DROP TABLE jobs;
DROP TABLE api_tokens;
DROP TABLE users;
