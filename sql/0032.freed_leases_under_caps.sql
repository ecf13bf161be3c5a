-- depends: 0031.workloads
-- A lease that ends (a result, a failure for good, a cancel) makes no task claimable: it frees
-- room only under a workload's lease cap. Announcing every ended lease on chunkwise_claimable
-- woke every waiting claim on every coordinator once per batch of results, to run a claim
-- that found nothing: 16 claims long-polling another workload cut a drain of 4 workers at
-- capacity 8 to 0.42x (475 against 1,125 tasks/s, 4 alternating turns, 2026-12-06). An ended
-- lease is now announced only when its workload has a lease cap (sql/0031); a task becoming
-- pending is announced as before, and release_blocked announces what it lets go itself.
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
       OR EXISTS (SELECT id FROM old_rows
                  WHERE status = 'leased'
                    AND workload IN (SELECT name FROM workloads
                                     WHERE max_leases_per_worker IS NOT NULL
                                        OR max_leases_total IS NOT NULL)
                  EXCEPT SELECT id FROM new_rows WHERE status = 'leased') THEN
        PERFORM pg_notify('chunkwise_claimable', '');
    END IF;
    RETURN NULL;
END
$$;
