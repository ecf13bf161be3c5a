"""What every service call needs besides its arguments: the pool, the limits, the workloads."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from psycopg_pool import ConnectionPool

from services.archive import Archive
from services.archive_retention import ArchiveSweeps
from services.auth import KnownPrincipals
from services.coordinators import Coordinator
from services.wakeups import Wakeups
from services.workloads import Workloads

# A day: a task that must wait longer should fail, and its job be retried when it can work.
MAX_RETRY_DELAY_SECONDS = 86_400


@dataclass(frozen=True)
class Limits:
    """Queue policy, from the coordinator's settings.

    The lease and queue caps here are csv_stats's; other workloads get the manifest_* ones,
    None meaning no cap of that kind.
    """

    lease_seconds: int = 30
    heartbeat_seconds: int = 10
    max_attempts: int = 3
    # A retryable failure's task waits this long before its next attempt, doubling with each
    # attempt up to the maximum, less up to half at random so failures together retry apart.
    retry_delay_seconds: int = 1
    retry_delay_max_seconds: int = 300
    max_leases_per_worker: int = 2
    max_leases_total: int = 8
    max_queued_chunks: int = 256
    manifest_max_leases_per_worker: int | None = None
    manifest_max_leases_total: int | None = None
    manifest_max_queued_tasks: int = 100_000
    manifest_max_tasks_per_job: int = 10_000
    allowed_workloads: tuple[str, ...] = ("csv_stats",)
    # (workload, tasks it may start a second): the workloads whose claims are rate limited.
    rate_limits: tuple[tuple[str, float], ...] = ()
    retention_days: int | None = None  # finished jobs are kept forever unless set
    # Archived inputs no job refers to are kept forever unless set (services/archive_retention).
    archive_retention_days: int | None = None
    # A worker row unseen this long and holding no lease is deleted, with its /metrics series.
    worker_retention_seconds: int = 86_400
    max_upload_bytes: int = 50 * 1024 * 1024
    # The most canonical JSON a task's stored result value may be (sql/0030).
    max_result_bytes: int = 1024 * 1024
    # Fair share: one user's unfinished tasks may fill this percent of a workload's queue cap,
    # its unfinished jobs there store this many bytes of parameters, args and labels, and it may
    # keep this many schedules.
    user_max_queued_percent: int = 25
    user_max_stored_bytes: int = 64 * 1024 * 1024
    user_max_schedules: int = 100


@dataclass(frozen=True)
class Runtime:
    """The coordinator process's shared resources, handed to services explicitly."""

    pool: ConnectionPool
    limits: Limits
    workloads: Workloads
    wakeups: Wakeups
    principals: KnownPrincipals
    archive_dir: Path
    temp_dir: Path
    # This process as the other coordinators on its database see it.
    coordinator: Coordinator
    # Where admitted uploads are kept and chunk inputs are read from: archive_dir, or a bucket.
    archive: Archive
    # When this process last swept the archive for inputs no job refers to.
    archive_sweeps: ArchiveSweeps = field(default_factory=ArchiveSweeps)
    # Set on shutdown: the maintenance loop ends its waiting instead of its next pass.
    stopping: threading.Event = field(default_factory=threading.Event)
    # Set when this process puts or resumes a schedule, and on shutdown: the maintenance
    # thread, asleep until its next pass or scheduled run, looks again.
    schedules_changed: threading.Event = field(default_factory=threading.Event)
