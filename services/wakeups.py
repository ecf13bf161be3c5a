"""Wake long-polling claims when PostgreSQL says tasks became claimable."""

from __future__ import annotations

import logging
import threading
import time

import psycopg
from psycopg import sql

from repositories.tasks import CLAIMABLE_CHANNEL

logger = logging.getLogger(__name__)


class Wakeups:
    """A generation counter bumped on every NOTIFY; waiters sleep on it without a DB connection.

    One listener thread per process holds one dedicated connection (outside the pool), so any
    number of waiting claims cost no pooled connections.
    """

    def __init__(self, conninfo: str | None):
        self._conninfo = conninfo
        self._cond = threading.Condition()
        self._generation = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def generation(self) -> int:
        """The number of wake-ups seen so far; pass it to wait()."""
        with self._cond:
            return self._generation

    def wait(self, seen: int, timeout: float) -> None:
        """Sleep until a wake-up newer than `seen`, or the timeout."""
        with self._cond:
            self._cond.wait_for(lambda: self._generation != seen, timeout=max(timeout, 0))

    def wake(self) -> None:
        """Wake every waiter (also used in-process, after our own commits)."""
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

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
        while not self._stop.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn:
                    conn.execute(sql.SQL("LISTEN {}").format(
                        sql.Identifier(CLAIMABLE_CHANNEL)))
                    backoff = 0.5
                    # A notification lost while reconnecting costs a claim at most its
                    # periodic re-check (one second), so no catch-up is needed here.
                    self.wake()
                    while not self._stop.is_set():
                        for _ in conn.notifies(timeout=1.0):
                            self.wake()
            except psycopg.Error as exc:
                if self._stop.is_set():
                    return
                logger.warning("notification listener lost its connection",
                               extra={"event": "listen_error", "error": str(exc)})
                time.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
