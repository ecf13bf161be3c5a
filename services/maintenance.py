"""One housekeeping pass: leases, stray tasks, merges, spools, history, tallies."""

from __future__ import annotations

import logging

from repositories import jobs as job_rows
from services import archive, jobs, logcontext, queue, tasks
from services.runtime import Runtime

logger = logging.getLogger(__name__)


def run_pass(rt: Runtime, *, trace_id: str | None = None) -> None:
    """Run every housekeeping step once, logging under `trace_id`."""
    logcontext.begin(trace_id=trace_id, operation="maintenance")
    tasks.expire_leases(rt)
    tasks.cancel_strays(rt)
    with rt.pool.connection() as conn:
        waiting = job_rows.merging_jobs(conn)
    for job_id, workload in waiting:
        with logcontext.scope(job_id=str(job_id)):
            rt.workloads.of(workload).merge(rt, job_id)
    archive.remove_stale_temp_files(rt.temp_dir, rt.archive_dir)
    jobs.delete_expired_history(rt)
    queue.fold_tallies(rt)
