"""How one worker process is set up: its id, limits, backoffs, and the fault to inject."""

from __future__ import annotations

import itertools
import math
import os
import secrets
import socket
from dataclasses import dataclass

from worker_cli.client import MAX_BATCH

CRASH_AFTER_COMPUTE = "crash-after-compute"
MAX_WORKLOADS = 20  # that one claim may name
PAUSE_AFTER_COMPUTE = "pause-after-compute"


# The suffix starts at random and counts up: random keeps containers apart (every worker may be
# pid 1 under the same hostname), counting keeps two workers of one process apart for certain.
_worker_suffixes = itertools.count(secrets.randbelow(1 << 24))


def default_worker_id() -> str:
    """Return `<hostname>-<pid>-<6 random hex>`: readable, and never shared by two workers."""
    suffix = next(_worker_suffixes) % (1 << 24)
    return f"{socket.gethostname()}-{os.getpid()}-{suffix:06x}"


@dataclass(frozen=True)
class Fault:
    """A failure to inject on purpose after a chunk is computed (for tests of fencing)."""

    point: str
    seconds: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Fault:
        """Parse `crash-after-compute` or `pause-after-compute=SECONDS`."""
        point, _, value = text.partition("=")
        if point == CRASH_AFTER_COMPUTE and not value:
            return cls(point)
        if point == PAUSE_AFTER_COMPUTE and value:
            try:
                seconds = float(value)
            except ValueError:
                seconds = -1.0
            if seconds >= 0:
                return cls(point, seconds)
        raise ValueError(
            f"unknown fault {text!r}: use {CRASH_AFTER_COMPUTE} or {PAUSE_AFTER_COMPUTE}=SECONDS"
        )


@dataclass(frozen=True)
class WorkerConfig:
    """How one worker process claims and runs chunks."""

    worker_id: str
    workloads: tuple[str, ...] = ("csv_stats",)
    capacity: int = 2
    wait_seconds: float = 10.0
    burst: bool = False
    max_tasks: int | None = None
    grace_seconds: float = 30.0
    fault: Fault | None = None
    # Least time between two claims that come back empty, in case the coordinator does not wait.
    idle_poll_seconds: float = 1.0
    claim_backoff_base: float = 1.0
    claim_backoff_cap: float = 30.0
    submit_backoff_base: float = 0.5
    submit_backoff_cap: float = 8.0

    def __post_init__(self) -> None:
        # The coordinator's own bounds (app/schemas/tasks.py), so a worker it would refuse at its
        # first claim refuses to start instead.
        if not 1 <= len(self.worker_id) <= 200 or not self.worker_id.isprintable():
            raise ValueError("worker_id must be 1 to 200 printable characters")
        if not 1 <= self.capacity <= MAX_BATCH:
            raise ValueError(f"capacity must be 1 to {MAX_BATCH}")
        if not 0 <= self.wait_seconds <= 30:
            raise ValueError("wait_seconds must be between 0 and 30")
        if self.max_tasks is not None and self.max_tasks < 1:
            raise ValueError("max_tasks must be at least 1")
        if not 0 <= self.grace_seconds < math.inf:
            raise ValueError("grace_seconds must be a number of seconds, 0 or more")
        if not 1 <= len(self.workloads) <= MAX_WORKLOADS:
            raise ValueError(f"name 1 to {MAX_WORKLOADS} workloads")
