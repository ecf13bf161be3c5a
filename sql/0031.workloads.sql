-- depends: 0030.task_values
-- The workloads coordinators serve, each with its caps and rate (docs/guides/workloads.md).
-- Operators add, change and remove them through the API; each coordinator's listener hears
-- the trigger's NOTIFY and reloads them, so a change holds everywhere within a second.
-- CHUNKWISE_ALLOWED_WORKLOADS and the limit variables only seed rows: a row an operator has
-- added or changed (changed_by set) keeps what the operator said, and one an operator removed
-- (removed_at set) stays removed, whatever a coordinator starting later is configured with.
CREATE TABLE workloads (
    name                       text PRIMARY KEY
                               CONSTRAINT workloads_name_slug CHECK (name ~ '^[a-z][a-z0-9_-]{0,62}$'),
    -- NULL: no cap of that kind.
    max_leases_per_worker      integer CHECK (max_leases_per_worker > 0),
    max_leases_total           integer CHECK (max_leases_total > 0),
    max_queued_tasks           integer NOT NULL CHECK (max_queued_tasks > 0),
    max_tasks_per_job          integer NOT NULL CHECK (max_tasks_per_job > 0),
    max_starts_per_second      double precision CHECK (max_starts_per_second > 0),
    max_queued_tasks_per_user  integer CHECK (max_queued_tasks_per_user > 0),
    max_stored_bytes_per_user  bigint CHECK (max_stored_bytes_per_user > 0),
    changed_by                 text,  -- NULL: as the settings seeded it
    changed_at                 timestamptz NOT NULL DEFAULT now(),
    removed_at                 timestamptz
);

-- Per row, so a seed that changes nothing (every coordinator's start) tells no one.
CREATE FUNCTION chunkwise_announce_workloads_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('chunkwise_workloads_changed', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER workloads_announce_change
    AFTER INSERT OR UPDATE OR DELETE ON workloads
    FOR EACH ROW EXECUTE FUNCTION chunkwise_announce_workloads_change();
