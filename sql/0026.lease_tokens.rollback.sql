ALTER TABLE workers DROP CONSTRAINT workers_credential_id_check;
ALTER TABLE workers DROP COLUMN credential_id;
ALTER TABLE task_attempts DROP COLUMN lease_sha256;
ALTER TABLE tasks DROP COLUMN lease_sha256;
