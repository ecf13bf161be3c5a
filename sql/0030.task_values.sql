-- depends: 0029.coordinators
-- A task's JSON arguments, as the canonical text its input_sha256 digests: on the row, so
-- the claim that leases a task returns them without another read. NULL for a task whose
-- input is elsewhere (input_uri).
ALTER TABLE tasks ADD COLUMN args text;
-- A completed task's stored result value, as the canonical JSON text its result_sha256
-- digests. Apart from tasks: the row the queue updates most never carries a large value, and
-- only the readers of results fetch it.
CREATE TABLE task_results (
    task_id  uuid PRIMARY KEY REFERENCES tasks (id) ON DELETE CASCADE,
    value    text NOT NULL
);
