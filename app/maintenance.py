"""The maintenance thread each coordinator process runs (started by gunicorn.conf.py)."""

from __future__ import annotations

import logging
import threading

from flask import Flask

from services import maintenance, metrics
from services.process import peak_rss_bytes
from services.runtime import Runtime

logger = logging.getLogger(__name__)


def start(app: Flask, interval: float) -> threading.Thread:
    """Run maintenance passes every `interval` seconds until the runtime is closed."""
    runtime: Runtime = app.extensions["chunkwise.runtime"]

    def loop() -> None:
        while not runtime.stopping.wait(interval):
            try:
                metrics.COORDINATOR_PEAK_RSS.set(peak_rss_bytes())
                maintenance.run_pass(runtime)
            except Exception:
                # The next pass retries; a database outage must not kill the thread.
                logger.exception("maintenance pass failed", extra={"event": "maintenance_error"})

    thread = threading.Thread(target=loop, name="chunkwise-maintenance", daemon=True)
    thread.start()
    return thread
