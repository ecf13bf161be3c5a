ALTER TABLE tasks DROP COLUMN deadline, DROP COLUMN timeout_seconds;
ALTER TABLE jobs DROP COLUMN timeout_seconds;
