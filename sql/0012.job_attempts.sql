-- depends: 0011.stray_tasks
-- A job keeps the attempts budget it was admitted with, so that a retry grants each task that
-- budget again rather than the coordinator's default. Jobs admitted before this migration have
-- none recorded (NULL): a retry grants them CHUNKWISE_MAX_ATTEMPTS, as it always did.
ALTER TABLE jobs ADD COLUMN max_attempts integer
    CONSTRAINT jobs_max_attempts_check CHECK (max_attempts > 0);
