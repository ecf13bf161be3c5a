"""Build the services' Runtime once per process and hand it to views."""

from __future__ import annotations

import atexit

from flask import Flask, current_app

from app.config import ConfigError, Settings
from app.db import open_pool
from services import archive, health
from services.runtime import Runtime
from services.wakeups import Wakeups


def init_app(app: Flask, settings: Settings) -> Runtime:
    """Check storage, open the pool, start the NOTIFY listener; close both when the process ends."""
    require_storage(settings)
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


def require_storage(settings: Settings) -> None:
    """Create the temp and archive directories; raise ConfigError unless they take an upload."""
    paths = {"CHUNKWISE_TEMP_DIR": settings.temp_dir, "CHUNKWISE_ARCHIVE_DIR": settings.archive_dir}
    problems = []
    for setting, directory in paths.items():
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            problems.append(f"{setting}={directory} cannot be created ({archive.errno_name(exc)})")
    if not problems:
        problems = [
            f"{p.setting}={paths[p.setting]} {p.problem}"
            for p in health.storage_problems(
                settings.temp_dir, settings.archive_dir, settings.limits.max_upload_bytes
            )
        ]
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))


def close(runtime: Runtime) -> None:
    """Stop the listener and close the pool (graceful shutdown)."""
    runtime.wakeups.stop()
    runtime.pool.close()


def get_runtime() -> Runtime:
    """The current app's Runtime."""
    return current_app.extensions["chunkwise.runtime"]
