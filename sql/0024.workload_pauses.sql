-- depends: 0023.job_dependencies
-- An operator pauses a workload: claims lease none of its tasks until it is resumed, while
-- its jobs are still admitted and its leased tasks still finish. A row a paused workload;
-- the claim statement reads it (a few rows, by primary key) so a pause holds from the first
-- claim that starts after it commits, in every coordinator at once.
CREATE TABLE workload_pauses (
    workload   text PRIMARY KEY,
    paused_by  text NOT NULL,
    paused_at  timestamptz NOT NULL DEFAULT now()
);
