"""CHUNKWISE_ARCHIVE_RETENTION_DAYS: archived inputs no job refers to are deleted once old.

An input outlives its job: retention deletes finished jobs (CHUNKWISE_RETENTION_DAYS), and an
admission refused after its upload was stored (a full queue) leaves the upload for the retry
that finds it there. Neither is deleted at once; this sweep deletes what is older than the
setting's days and unreferenced, from the local directory or the bucket alike.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import TYPE_CHECKING

from repositories import jobs as job_rows

if TYPE_CHECKING:  # services/runtime.py holds this module's ArchiveSweeps
    from services.runtime import Runtime

logger = logging.getLogger(__name__)

# Listing a bucket is paid per request: a sweep an hour is soon enough for a setting in days.
SWEEP_INTERVAL_SECONDS = 3600
PAGE = 500


class ArchiveSweeps:
    """When this process last swept the archive, so each maintenance pass need not."""

    def __init__(self, interval: float = SWEEP_INTERVAL_SECONDS):
        self._interval = interval
        self._next_at = 0.0
        self._lock = threading.Lock()

    def due(self, now: float) -> bool:
        """True at most once an interval: the caller sweeps."""
        with self._lock:
            if now < self._next_at:
                return False
            self._next_at = now + self._interval
            return True


def remove_unreferenced_inputs(rt: Runtime, now: float | None = None) -> int:
    """Delete archived inputs older than the retention days that no job refers to (none when
    the setting is unset, or this process swept within the hour)."""
    days = rt.limits.archive_retention_days
    now = time.time() if now is None else now
    if days is None or not rt.archive_sweeps.due(time.monotonic()):
        return 0
    cutoff = now - days * 86_400
    removed = 0
    stored = rt.archive.stored_before(cutoff)
    while page := list(itertools.islice(stored, PAGE)):
        with rt.pool.connection() as conn:
            kept = job_rows.referenced_inputs(conn, page)
        # Checked again just before each delete (remove_if_before): an upload of the same
        # bytes renews the input's time before its job commits, so the sweep leaves it be.
        removed += sum(rt.archive.remove_if_before(d, cutoff) for d in page if d not in kept)
    if removed:
        logger.info(
            "unreferenced archived inputs deleted",
            extra={"event": "archive_retention", "count": removed, "days": days},
        )
    return removed
