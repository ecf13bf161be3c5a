-- depends: 0021.task_timeouts
-- A schedule submits a manifest job on a cron expression, read in its IANA time zone: each of
-- a user's schedules keeps the job's body, as POST /api/v1/jobs takes it, and the time of its
-- next run. The maintenance pass takes due rows with SKIP LOCKED, so coordinators share the
-- work, and submits each run under an Idempotency-Key naming the schedule and the run's
-- time, so a pass that dies between the submit and moving next_run_at on submits nothing
-- twice.
-- last_job_id has no foreign key: retention deletes old jobs, and the schedule stays.
CREATE TABLE schedules (
    id           uuid PRIMARY KEY,
    owner_id     bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         text NOT NULL,
    cron         text NOT NULL,
    timezone     text NOT NULL DEFAULT 'UTC',
    job          jsonb NOT NULL,
    paused       boolean NOT NULL DEFAULT false,
    next_run_at  timestamptz NOT NULL,
    last_run_at  timestamptz,
    last_job_id  uuid,
    last_error   jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT schedules_owner_name_key UNIQUE (owner_id, name)
);
CREATE INDEX schedules_due_idx ON schedules (next_run_at) WHERE NOT paused;
