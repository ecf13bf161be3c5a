"""One housekeeping pass: leases, strays, merges, schedules, spools, history, workers, tallies,
sessions, planner statistics."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from uuid import UUID

from repositories import jobs as job_rows
from services import (
    archive,
    archive_retention,
    coordinators,
    jobs,
    logcontext,
    queue,
    schedules,
    statistics,
    tasks,
    ui_sessions,
    workers,
)
from services.runtime import Runtime

logger = logging.getLogger(__name__)


def run_pass(rt: Runtime, *, trace_id: str | None = None) -> None:
    """Run every housekeeping step once, logging under `trace_id`.

    A step that fails, or one job's merge, does not stop the others: one bad job must not leave
    every other job's expired leases held or the history growing. The first failure is raised
    once all have run.
    """
    logcontext.begin(trace_id=trace_id, operation="maintenance")
    failures: list[Exception] = []

    def attempt(step: Callable[..., Any], *args: object) -> Any:
        try:
            return step(*args)
        except Exception as exc:
            # An outage fails every step alike; the pass's own line says so once.
            if failures and type(exc) is not type(failures[0]):
                logger.error(
                    f"another maintenance step failed ({type(exc).__name__})",
                    exc_info=exc,
                    extra={"event": "maintenance_step_error", "error": str(exc)[:500]},
                )
            failures.append(exc)
            return None

    attempt(coordinators.check_in, rt)
    attempt(tasks.expire_leases, rt)
    attempt(tasks.cancel_strays, rt)
    for job_id, workload in attempt(_merging_jobs, rt) or []:
        attempt(_merge, rt, job_id, workload)
    attempt(schedules.run_due_schedules, rt)
    attempt(archive.remove_stale_temp_files, rt.temp_dir, rt.archive_dir)
    attempt(jobs.delete_expired_history, rt)
    attempt(archive_retention.remove_unreferenced_inputs, rt)
    attempt(workers.delete_idle_workers, rt)
    attempt(queue.fold_tallies, rt)
    attempt(jobs.fold_chunk_tallies, rt)
    attempt(ui_sessions.delete_expired_sessions, rt.pool)
    attempt(statistics.refresh_outgrown, rt)
    if failures:
        raise failures[0]


def run_schedules(rt: Runtime, *, trace_id: str | None = None) -> None:
    """Submit the scheduled runs whose time has come, between passes."""
    logcontext.begin(trace_id=trace_id, operation="maintenance")
    schedules.run_due_schedules(rt)


def check_in(rt: Runtime, *, trace_id: str | None = None) -> None:
    """Register this coordinator as it starts, before its first pass."""
    logcontext.begin(trace_id=trace_id, operation="maintenance")
    coordinators.check_in(rt)


def _merging_jobs(rt: Runtime) -> list[tuple[UUID, str]]:
    with rt.pool.connection() as conn:
        return job_rows.merging_jobs(conn)


def _merge(rt: Runtime, job_id: UUID, workload: str) -> None:
    with logcontext.scope(job_id=str(job_id)):
        rt.workloads.of(workload).merge(rt.pool, job_id)
