"""The maintenance thread each coordinator process runs (started by gunicorn.conf.py)."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

import psycopg
import psycopg_pool
from flask import Flask

from services import maintenance, metrics, schedules
from services.errors import Unavailable
from services.runtime import Runtime
from worker_cli.process import peak_rss_bytes

logger = logging.getLogger(__name__)

# A database restart or failover: the next pass is expected to succeed.
TRANSIENT_ERRORS = (psycopg.OperationalError, psycopg_pool.PoolTimeout, Unavailable)
# Consecutive failed passes after which a transient error is logged as an outage (5 s apart by
# default, so about half a minute), and again every as many passes while it lasts.
ESCALATE_AFTER = 6
# A wake-up for a scheduled run comes this long after its time, so that the run is due by the
# clock the step then reads.
RUN_TIME_MARGIN = 0.01


class PassFailures:
    """Logs each failed pass by its cause: a blip warns in one line, an outage or a bug errs."""

    def __init__(self, escalate_after: int = ESCALATE_AFTER):
        self.escalate_after = escalate_after
        self.consecutive = 0

    def failed(self, exc: Exception, trace_id: str) -> None:
        """Log one failed pass."""
        self.consecutive += 1
        fields = {
            "event": "maintenance_error",
            "error_class": type(exc).__name__,
            "error": str(exc)[:500],
            "consecutive_failures": self.consecutive,
            "trace_id": trace_id,
        }
        if isinstance(exc, TRANSIENT_ERRORS) and self.consecutive % self.escalate_after:
            logger.warning(
                f"maintenance pass failed ({type(exc).__name__}); the next pass retries",
                extra=fields,
            )
            return
        logger.error(
            f"maintenance pass failed ({type(exc).__name__}, {self.consecutive} in a row)",
            exc_info=exc,
            extra=fields,
        )

    def succeeded(self) -> None:
        """Note a pass that went through, saying so if it ends a run of failures."""
        if self.consecutive:
            logger.info(
                f"maintenance recovered after {self.consecutive} failed passes",
                extra={"event": "maintenance_recovered", "failed_passes": self.consecutive},
            )
        self.consecutive = 0


def run_one_pass(
    runtime: Runtime,
    failures: PassFailures,
    step: Callable[..., None] | None = None,
) -> bool:
    """Run one pass (or `step`) under a trace id of its own; whether it went through. A
    failure is logged, never raised."""
    trace_id = uuid.uuid4().hex
    try:
        metrics.COORDINATOR_PEAK_RSS.set(peak_rss_bytes())
        (step or maintenance.run_pass)(runtime, trace_id=trace_id)
    except Exception as exc:
        # The next pass retries; a database outage must not kill the thread.
        failures.failed(exc, trace_id)
        return False
    failures.succeeded()
    return True


def seconds_until_next_run(runtime: Runtime) -> float | None:
    """Seconds until the soonest scheduled run still to come; None if unknown."""
    try:
        return schedules.seconds_until_next_run(runtime)
    except Exception as exc:
        # The pass at the usual interval runs it, late; and says what is wrong if it persists.
        logger.warning(
            "could not read when the next scheduled run is",
            extra={"event": "schedule_time_unknown", "error": str(exc)[:500]},
        )
        return None


def start(app: Flask, interval: float) -> threading.Thread:
    """Run maintenance passes every `interval` seconds until the runtime is closed, and each
    scheduled run at its time in between."""
    runtime: Runtime = app.extensions["chunkwise.runtime"]

    def loop() -> None:
        failures = PassFailures()
        # At once: a coordinator started after this one compares its settings with these.
        run_one_pass(runtime, failures, maintenance.check_in)
        next_pass = time.monotonic() + interval
        went_through = True
        while not runtime.stopping.is_set():
            wait = max(0.0, next_pass - time.monotonic())
            # Asked after a step that went through: during an outage the pass keeps its pace.
            run_in = seconds_until_next_run(runtime) if went_through else None
            if run_in is not None and run_in < wait:
                wait = run_in + RUN_TIME_MARGIN
            if runtime.schedules_changed.wait(wait):
                # A schedule put here may run before either: look again (or stop).
                runtime.schedules_changed.clear()
                went_through = True
                continue
            if time.monotonic() >= next_pass:
                went_through = run_one_pass(runtime, failures)
                next_pass = time.monotonic() + interval
            else:
                went_through = run_one_pass(runtime, failures, maintenance.run_schedules)

    thread = threading.Thread(target=loop, name="chunkwise-maintenance", daemon=True)
    thread.start()
    return thread
