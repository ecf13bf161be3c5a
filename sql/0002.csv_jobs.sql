-- depends: 0001.queue
-- The accepted summary of each chunk: the primary key makes a second acceptance impossible.
CREATE TABLE chunk_summaries (
    task_id      uuid PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    job_id       uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    chunk_index  integer NOT NULL,
    attempt      integer NOT NULL,
    summary      jsonb NOT NULL,
    accepted_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT chunk_summaries_job_chunk_key UNIQUE (job_id, chunk_index)
);
