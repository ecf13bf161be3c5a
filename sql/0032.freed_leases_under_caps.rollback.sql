-- Every ended lease announced again, as sql/0015 had it.
CREATE OR REPLACE FUNCTION chunkwise_announce_task_changes() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('chunkwise_job_changed', changed.job_id::text)
    FROM (SELECT job_id
          FROM (SELECT id, job_id, status FROM new_rows
                EXCEPT SELECT id, job_id, status FROM old_rows) AS moved
          GROUP BY job_id) AS changed;
    IF EXISTS (SELECT id FROM new_rows WHERE status = 'pending'
               EXCEPT SELECT id FROM old_rows WHERE status = 'pending')
       OR EXISTS (SELECT id FROM old_rows WHERE status = 'leased'
                  EXCEPT SELECT id FROM new_rows WHERE status = 'leased') THEN
        PERFORM pg_notify('chunkwise_claimable', '');
    END IF;
    RETURN NULL;
END
$$;
