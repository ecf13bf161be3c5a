"""Build the services' Runtime once per process and hand it to views."""

from __future__ import annotations

import atexit

from flask import Flask, current_app

from app.config import Settings
from app.db import open_pool
from services.runtime import Runtime
from services.wakeups import Wakeups


def init_app(app: Flask, settings: Settings) -> Runtime:
    """Open the pool, start the NOTIFY listener, and close both when the process ends."""
    settings.temp_dir.mkdir(parents=True, exist_ok=True)
    settings.archive_dir.mkdir(parents=True, exist_ok=True)
    runtime = Runtime(
        pool=open_pool(settings),
        limits=settings.limits,
        wakeups=Wakeups(settings.database_url),
        archive_dir=settings.archive_dir,
        temp_dir=settings.temp_dir,
    )
    runtime.wakeups.start()
    app.extensions["chunkwise.runtime"] = runtime
    atexit.register(close, runtime)
    return runtime


def close(runtime: Runtime) -> None:
    """Stop the listener and close the pool (graceful shutdown)."""
    runtime.wakeups.stop()
    runtime.pool.close()


def get_runtime() -> Runtime:
    """The current app's Runtime."""
    return current_app.extensions["chunkwise.runtime"]
