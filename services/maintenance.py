"""One pass of housekeeping: expire leases, finish merges a dead coordinator left, tidy spools."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from repositories import jobs as job_rows
from services import archive, csvjobs, logcontext, tasks
from services.runtime import Runtime

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PassReport:
    """What one pass did."""

    leases_expired: int
    jobs_merged: int
    temp_files_removed: int


def run_pass(rt: Runtime, *, trace_id: str | None = None) -> PassReport:
    """Run every housekeeping step once, logging under `trace_id`."""
    logcontext.begin(trace_id=trace_id, operation="maintenance")
    expired = tasks.expire_leases(rt)
    with rt.pool.connection() as conn:
        waiting = job_rows.merging_job_ids(conn)
    merged = 0
    for job_id in waiting:
        with logcontext.scope(job_id=str(job_id)):
            if csvjobs.merge_job(rt, job_id) is not None:
                merged += 1
    removed = archive.remove_stale_temp_files(rt.temp_dir)
    return PassReport(len(expired), merged, removed)
