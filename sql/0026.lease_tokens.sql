-- depends: 0025.workload_rates
-- A lease is a capability: each claim hands its worker a secret lease token per task, and
-- only its SHA-256 is kept, on the task while the lease lasts (every call under the lease is
-- fenced on it) and on the attempt for good (so the holder, and only the holder, is told why
-- a later call was refused, and can replay a result). A worker id is bound to the worker
-- credential (api_tokens.id) that first claimed under it, so no other credential can act,
-- or be credited, under it. No foreign key: a claim must not lock the credential's row.
ALTER TABLE tasks ADD COLUMN lease_sha256 text;
ALTER TABLE task_attempts ADD COLUMN lease_sha256 text;
ALTER TABLE workers ADD COLUMN credential_id bigint;
-- A claim naming a worker id bound to another credential sets it to 0, no credential's id
-- (they start at 1), and this refuses the whole claim statement. NULL (unbound: a row seen
-- before this migration, or written by a coordinator not yet upgraded) passes, and the next
-- claim binds it.
ALTER TABLE workers ADD CONSTRAINT workers_credential_id_check CHECK (credential_id > 0);
