"""Build the services' Runtime once per process and hand it to views."""

from __future__ import annotations

import atexit

from flask import Flask, current_app

from app.config import Settings
from app.db import open_pool
from services import csvstats
from services.csvjobs import CsvStats
from services.runtime import Limits, Runtime
from services.wakeups import Wakeups
from services.workloads import Caps, Workloads


def init_app(app: Flask, settings: Settings) -> Runtime:
    """Open the pool, start the NOTIFY listener, and close both when the process ends."""
    settings.temp_dir.mkdir(parents=True, exist_ok=True)
    settings.archive_dir.mkdir(parents=True, exist_ok=True)
    runtime = Runtime(
        pool=open_pool(settings),
        limits=settings.limits,
        workloads=workloads_for(settings.limits),
        wakeups=Wakeups(settings.database_url),
        archive_dir=settings.archive_dir,
        temp_dir=settings.temp_dir,
    )
    runtime.wakeups.start()
    app.extensions["chunkwise.runtime"] = runtime
    atexit.register(close, runtime)
    return runtime


def workloads_for(limits: Limits) -> Workloads:
    """csv_stats with its own rules and caps; every other allowed workload with the defaults."""
    csv_caps = Caps(
        max_leases_per_worker=limits.max_leases_per_worker,
        max_leases_total=limits.max_leases_total,
        max_queued_tasks=limits.max_queued_chunks,
        max_tasks_per_job=csvstats.MAX_CHUNKS,
    )
    manifest_caps = Caps(
        max_leases_per_worker=limits.manifest_max_leases_per_worker,
        max_leases_total=limits.manifest_max_leases_total,
        max_queued_tasks=limits.manifest_max_queued_tasks,
        max_tasks_per_job=limits.manifest_max_tasks_per_job,
    )
    return Workloads(limits.allowed_workloads, manifest_caps, [CsvStats(csv_caps)])


def close(runtime: Runtime) -> None:
    """Stop the maintenance loop and the listener, then close the pool (graceful shutdown)."""
    runtime.stopping.set()
    runtime.wakeups.stop()
    runtime.pool.close()


def get_runtime() -> Runtime:
    """The current app's Runtime."""
    return current_app.extensions["chunkwise.runtime"]
