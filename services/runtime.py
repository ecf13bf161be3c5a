"""What every service call needs besides its arguments: the pool, the limits, the wake-ups."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from psycopg_pool import ConnectionPool

from services.wakeups import Wakeups


@dataclass(frozen=True)
class Limits:
    """Queue policy, from the coordinator's settings."""

    lease_seconds: int = 30
    heartbeat_seconds: int = 10
    max_attempts: int = 3
    max_leases_per_worker: int = 2
    max_leases_total: int = 8
    max_queued_chunks: int = 256
    allowed_workloads: tuple[str, ...] = ("csv_stats",)
    max_upload_bytes: int = 50 * 1024 * 1024


@dataclass(frozen=True)
class Runtime:
    """The coordinator process's shared resources, handed to services explicitly."""

    pool: ConnectionPool
    limits: Limits
    wakeups: Wakeups
    archive_dir: Path
    temp_dir: Path
