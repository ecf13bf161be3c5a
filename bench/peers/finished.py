"""Counting finished no-op tasks inside a peer's worker, for the bench to read from a file.

The worker appends "<count> <unix time>" to $PEERS_DONE_FILE each time its count of finished
tasks reaches a multiple of REPORT_EVERY: one line per hundred tasks, so the counting costs
the drain next to nothing, and the bench knows when the last task of a drain returned.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

REPORT_EVERY = 100

_lock = threading.Lock()
_finished = 0


def count_finished() -> None:
    """Count one finished task; every REPORT_EVERY, append the count and the time to the file."""
    global _finished
    with _lock:
        _finished += 1
        if _finished % REPORT_EVERY:
            return
        with open(os.environ["PEERS_DONE_FILE"], "a") as done:
            done.write(f"{_finished} {time.time()}\n")


def finished_at(path: Path, count: int) -> float | None:
    """The unix time at which the worker writing `path` had finished `count` tasks, if it has."""
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        done, at = line.split()
        if int(done) >= count:
            return float(at)
    return None


def wait_finished(path: Path, count: int, deadline: float, poll: float = 0.005) -> float | None:
    """Wait until the worker has finished `count` tasks; its time then, or None at the deadline
    (time.monotonic())."""
    while time.monotonic() < deadline:
        at = finished_at(path, count)
        if at is not None:
            return at
        time.sleep(poll)
    return None
