"""Timing primitives of the worker: retry backoff and heartbeat due times, on an injected clock."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable


class Backoff:
    """Capped exponential delay with jitter, reset after a success."""

    def __init__(self, base: float, cap: float, *, rng: Callable[[], float] = random.random):
        self.base = base
        self.cap = cap
        self.failures = 0
        self._rng = rng

    def next_delay(self, retry_after: float | None = None) -> float:
        """Return how long to wait before the next try, and count one more failure."""
        ceiling = min(self.cap, self.base * 2**self.failures)
        self.failures += 1
        # "Equal jitter": never zero (so no spin), never above the cap, and spread out so a
        # fleet of workers that lost the coordinator together do not return together.
        delay = ceiling / 2 + self._rng() * ceiling / 2
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.cap))
        return delay

    def reset(self) -> None:
        """Start again from the base delay."""
        self.failures = 0


class HeartbeatSchedule:
    """When each in-flight chunk's next heartbeat is due, on the worker's clock."""

    def __init__(self) -> None:
        self._due: dict[tuple, float] = {}
        self._lock = threading.Lock()

    def add(self, key: tuple, due_at: float) -> None:
        """Start beating for a chunk."""
        with self._lock:
            self._due[key] = due_at

    def remove(self, key: tuple) -> None:
        """Stop beating for a chunk."""
        with self._lock:
            self._due.pop(key, None)

    def reschedule(self, key: tuple, due_at: float) -> None:
        """Move a chunk's next beat, unless it was removed meanwhile."""
        with self._lock:
            if key in self._due:
                self._due[key] = due_at

    def due(self, now: float) -> list[tuple]:
        """Return the chunks whose beat is due at `now`, most overdue first."""
        with self._lock:
            return [key for key, at in sorted(self._due.items(), key=lambda kv: kv[1]) if at <= now]

    def next_due(self) -> float | None:
        """Return when the next beat of any chunk is due, or None."""
        with self._lock:
            return min(self._due.values(), default=None)
