-- The durable queue: principals, jobs made of tasks, the attempt history, workers,
-- and the outbox and audit log written in the same transaction as the change they record.

CREATE TABLE users (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL CONSTRAINT users_name_key UNIQUE,
    role        text NOT NULL CONSTRAINT users_role_check CHECK (role IN ('user', 'operator')),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Only a SHA-256 of each token is stored; a worker token belongs to no user.
CREATE TABLE api_tokens (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    token_sha256  text NOT NULL CONSTRAINT api_tokens_token_sha256_key UNIQUE,
    kind          text NOT NULL CONSTRAINT api_tokens_kind_check CHECK (kind IN ('user', 'worker')),
    user_id       bigint REFERENCES users (id),
    name          text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    revoked_at    timestamptz,
    CONSTRAINT api_tokens_owner_check CHECK ((kind = 'user') = (user_id IS NOT NULL))
);

CREATE TABLE jobs (
    id               uuid PRIMARY KEY,
    owner_id         bigint NOT NULL REFERENCES users (id),
    workload         text NOT NULL,
    input_uri        text NOT NULL,
    input_sha256     text,
    parameters       jsonb NOT NULL DEFAULT '{}',
    labels           jsonb NOT NULL DEFAULT '{}',
    priority         smallint NOT NULL DEFAULT 0
                     CONSTRAINT jobs_priority_check CHECK (priority BETWEEN 0 AND 255),
    status           text NOT NULL DEFAULT 'queued'
                     CONSTRAINT jobs_status_check CHECK (status IN
                         ('queued', 'running', 'merging', 'succeeded', 'failed', 'cancelled')),
    revision         integer NOT NULL DEFAULT 1,
    chunks_total     integer NOT NULL CONSTRAINT jobs_chunks_total_check CHECK (chunks_total > 0),
    result           jsonb,
    partial_result   jsonb,
    error            jsonb,
    merge_seconds    double precision,
    idempotency_key  text,
    request_sha256   text,
    trace_id         text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    completed_at     timestamptz,
    CONSTRAINT jobs_idempotency_key UNIQUE (owner_id, idempotency_key),
    CONSTRAINT jobs_result_only_when_succeeded CHECK (result IS NULL OR status = 'succeeded')
);
CREATE INDEX jobs_owner_created_idx ON jobs (owner_id, created_at DESC, id DESC);
CREATE INDEX jobs_created_idx ON jobs (created_at DESC, id DESC);
CREATE INDEX jobs_merging_idx ON jobs (id) WHERE status = 'merging';

CREATE TABLE tasks (
    id                uuid PRIMARY KEY,
    job_id            uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    chunk_index       integer NOT NULL CONSTRAINT tasks_chunk_index_check CHECK (chunk_index >= 0),
    workload          text NOT NULL,
    -- Copied from the job so that the claim query reads one table through one index.
    priority          smallint NOT NULL,
    input_uri         text NOT NULL,
    input_sha256      text NOT NULL,
    parameters        jsonb NOT NULL DEFAULT '{}',
    status            text NOT NULL DEFAULT 'pending'
                      CONSTRAINT tasks_status_check CHECK (status IN
                          ('pending', 'leased', 'completed', 'failed', 'cancelled')),
    attempt           integer NOT NULL DEFAULT 0 CONSTRAINT tasks_attempt_check CHECK (attempt >= 0),
    max_attempts      integer NOT NULL CONSTRAINT tasks_max_attempts_check CHECK (max_attempts > 0),
    lost_retries      integer NOT NULL DEFAULT 0,
    read_retries      integer NOT NULL DEFAULT 0,
    lease_owner       text,
    lease_expires_at  timestamptz,
    heartbeat_at      timestamptz,
    checkpoint        jsonb,
    result_uri        text,
    result_sha256     text,
    metrics           jsonb,
    error_code        text,
    error_message     text,
    error_details     jsonb,
    created_at        timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,
    completed_at      timestamptz,
    version           integer NOT NULL DEFAULT 1,
    CONSTRAINT tasks_job_chunk_key UNIQUE (job_id, chunk_index),
    CONSTRAINT tasks_completed_has_result CHECK
        (status <> 'completed' OR (result_uri IS NOT NULL AND result_sha256 IS NOT NULL)),
    CONSTRAINT tasks_leased_has_lease CHECK
        (status <> 'leased' OR (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL))
);
-- The claim order: higher priority first, then older, then chunk order; pending rows only.
CREATE INDEX tasks_claim_idx ON tasks (workload, priority DESC, created_at, job_id, chunk_index)
    WHERE status = 'pending';
-- Per-job lookups use the leading job_id of tasks_job_chunk_key; this one serves the sweeper
-- and the lease caps, which only ever look at leased rows.
CREATE INDEX tasks_leased_idx ON tasks (lease_expires_at) WHERE status = 'leased';
CREATE INDEX tasks_lease_owner_idx ON tasks (lease_owner) WHERE status = 'leased';

-- One row per claim: the history a user sees and log lines link to.
CREATE TABLE task_attempts (
    id           uuid PRIMARY KEY,
    task_id      uuid NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    attempt      integer NOT NULL,
    worker_id    text NOT NULL,
    trace_id     text NOT NULL,
    leased_at    timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    outcome      text CONSTRAINT task_attempts_outcome_check CHECK (outcome IN
                     ('completed', 'failed', 'retried', 'lease_expired', 'cancelled')),
    error_code     text,
    error_message  text,
    CONSTRAINT task_attempts_task_attempt_key UNIQUE (task_id, attempt)
);

CREATE TABLE workers (
    id              text PRIMARY KEY,
    first_seen_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at    timestamptz NOT NULL DEFAULT now(),
    capacity        integer NOT NULL,
    workloads       text[] NOT NULL,
    tasks_done      integer NOT NULL DEFAULT 0,
    peak_rss_bytes  bigint
);

CREATE TABLE outbox (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    owner_id    bigint NOT NULL REFERENCES users (id),
    event       text NOT NULL,
    payload     jsonb NOT NULL DEFAULT '{}',
    trace_id    text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_owner_idx ON outbox (owner_id, id);

CREATE TABLE audit_log (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    actor       text NOT NULL,
    action      text NOT NULL,
    target      text NOT NULL,
    trace_id    text NOT NULL,
    details     jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now()
);
