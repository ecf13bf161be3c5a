"""Wake long-polling claims and job watchers when PostgreSQL says something changed."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from uuid import UUID

import psycopg

from repositories import channels
from services import metrics

logger = logging.getLogger(__name__)

# A long poll refused a waiting place is told to come back after this long (Retry-After):
# long enough that refused pollers do not keep the threads busy, short enough for a worker.
RETRY_WAIT_SECONDS = 3


class Wakeups:
    """Counters bumped by NOTIFY; waiters sleep on them without a DB connection.

    One counter says tasks may have become claimable; one per watched job counts its changes.
    One listener thread per process holds one dedicated connection (outside the pool), so any
    number of waiting claims and watches cost no pooled connections. The same thread calls
    `credentials_changed` when a token or a user changes, and whenever it (re)connects, since
    it may have missed that news meanwhile; and `recheck_connections` the moment its
    connection breaks, which a restarted or cut-off server does to the pool's idle ones at the
    same time, and again once it is back, before anything else: backends ended together do not
    all exit at once, and one still answering the first check is surely gone by the second.
    It calls `workloads_changed` when a workload is added, changed or removed, and whenever it
    (re)connects, having perhaps missed such news.
    """

    def __init__(
        self,
        conninfo: str | None,
        credentials_changed: Callable[[], None] = lambda: None,
        recheck_connections: Callable[[], None] = lambda: None,
        max_waiting: int = 8,
        workloads_changed: Callable[[], None] = lambda: None,
    ):
        self._conninfo = conninfo
        self._max_waiting = max_waiting
        self._waiting = 0
        self._places = threading.Lock()
        self._credentials_changed = credentials_changed
        self._recheck_connections = recheck_connections
        self._workloads_changed = workloads_changed
        self._cond = threading.Condition()
        self._generation = 0
        # A separate condition, so a job's change does not wake every waiting claim too.
        self._jobs = threading.Condition()
        self._watchers: Counter[UUID] = Counter()
        self._job_changes: dict[UUID, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @contextmanager
    def waiting(self, wanted: bool) -> Iterator[bool]:
        """Hold a waiting place while the block runs, if wanted: False when all are taken.

        A claim or a watch that may not wait answers at once: threads the long polls may not
        take stay free for health checks and every other call.
        """
        with self._places:
            held = wanted and self._waiting < self._max_waiting
            self._waiting += held
        if wanted and not held:
            metrics.REFUSED_WAITS.inc()
        if held:
            metrics.WAITING_REQUESTS.inc()
        try:
            yield held
        finally:
            if held:
                metrics.WAITING_REQUESTS.dec()
                with self._places:
                    self._waiting -= 1

    def generation(self) -> int:
        """The number of wake-ups seen so far; pass it to wait()."""
        with self._cond:
            return self._generation

    def wait(self, seen: int, timeout: float) -> None:
        """Sleep until a wake-up newer than `seen`, or the timeout."""
        with self._cond:
            self._cond.wait_for(lambda: self._generation != seen, timeout=max(timeout, 0))

    def wake(self) -> None:
        """Wake every waiting claim: something may have become claimable."""
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    @contextmanager
    def watching(self, job_id: UUID) -> Iterator[None]:
        """Count the job's changes while the block runs (only watched jobs are counted)."""
        with self._jobs:
            self._watchers[job_id] += 1
            self._job_changes.setdefault(job_id, 0)
        try:
            yield
        finally:
            with self._jobs:
                self._watchers[job_id] -= 1
                if not self._watchers[job_id]:
                    del self._watchers[job_id], self._job_changes[job_id]

    def job_changes(self, job_id: UUID) -> int:
        """The changes seen to a watched job so far; pass it to wait_for_job()."""
        with self._jobs:
            return self._job_changes[job_id]

    def wait_for_job(self, job_id: UUID, seen: int, timeout: float) -> None:
        """Sleep until a watched job changes after `seen`, or the timeout."""
        with self._jobs:
            self._jobs.wait_for(lambda: self._job_changes[job_id] != seen, timeout=max(timeout, 0))

    def job_changed(self, job_id: UUID) -> None:
        """Wake whoever watches this job."""
        with self._jobs:
            if job_id in self._job_changes:
                self._job_changes[job_id] += 1
                self._jobs.notify_all()

    def start(self) -> None:
        """Start the listener thread (idempotent)."""
        if self._conninfo is None or (self._thread and self._thread.is_alive()):
            return
        self._thread = threading.Thread(target=self._listen, name="chunkwise-listen", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the listener to finish."""
        self._stop.set()

    def _listen(self) -> None:
        backoff = 0.5
        lost = False
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn:
                    channels.listen(conn)
                    backoff = 0.5
                    if lost:
                        self._recheck()
                        lost = False
                    # A notification lost while reconnecting costs a claim or a watch at most
                    # its periodic re-check (one second); a credential's change, nothing.
                    self._credentials_changed()
                    self._reload_workloads()
                    self.wake()
                    while not self._stop.is_set():
                        for notice in conn.notifies(timeout=1.0):
                            if notice.channel == channels.JOB_CHANGED:
                                # Most notices name jobs nobody in this process watches:
                                # dropped unparsed and unlocked. A watch counts from before
                                # its first read, so a change this skips is one that read sees.
                                if self._job_changes:
                                    self.job_changed(UUID(notice.payload))
                            elif notice.channel == channels.CREDENTIALS_CHANGED:
                                self._credentials_changed()
                            elif notice.channel == channels.WORKLOADS_CHANGED:
                                self._reload_workloads()
                            else:
                                self.wake()
            except psycopg.Error as exc:
                if self._stop.is_set():
                    return
                logger.warning(
                    "notification listener lost its connection",
                    extra={"event": "listen_error", "error": str(exc)},
                )
                lost = True
                self._recheck()
                time.sleep(backoff)
                backoff = min(backoff * 2, 10.0)

    def _recheck(self) -> None:
        _outlived(
            self._recheck_connections,
            "could not re-check the pool's connections",
            "pool_recheck_error",
        )

    def _reload_workloads(self) -> None:
        if self._stop.is_set():  # the pool it reads with may be closed already
            return
        # A schema still behind (no workloads table yet) must not cost the claims their wake-ups.
        _outlived(
            self._workloads_changed,
            "could not reload the workloads; serving those loaded before",
            "workloads_reload_error",
        )


def _outlived(action: Callable[[], object], message: str, event: str) -> None:
    """Run a listener's side task; log what it raises, so the listener outlives it."""
    try:
        action()
    except Exception:  # noqa: BLE001 - the listener must outlive what this meets
        logger.exception(message, extra={"event": event})
