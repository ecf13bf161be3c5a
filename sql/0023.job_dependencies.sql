-- depends: 0022.schedules
-- transactional: false
-- A manifest job may depend on other jobs. Its tasks are admitted at once, counted against the
-- queue's cap as any queued task is, but wait with not_before at 9999-12-31 (a time Python's
-- datetime holds, unlike 'infinity'): in tasks_waiting_idx, past where any claim reads. When
-- every job it names has succeeded they are released; one that fails or is cancelled fails
-- it. The job keeps the ids it named, for its view; the index finds a finishing job's
-- dependents, and is partial, so the jobs that depend on nothing (most) cost it nothing to
-- write. Nullable with no default: the table is not rewritten. Built CONCURRENTLY, as 0019's
-- indexes: an interrupted build leaves an INVALID index; drop it, then apply.
ALTER TABLE jobs ADD COLUMN depends_on uuid[];
CREATE INDEX CONCURRENTLY jobs_dependents_idx ON jobs USING gin (depends_on)
    WHERE depends_on IS NOT NULL;
