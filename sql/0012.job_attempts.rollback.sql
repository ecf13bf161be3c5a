ALTER TABLE jobs DROP COLUMN max_attempts;
