"""Build the services' Runtime once per process and hand it to views."""

from __future__ import annotations

import atexit
import importlib.metadata
import logging
import os
import secrets
import socket

import psycopg
from flask import Flask, current_app

from app.config import ConfigError, Settings, shared_settings
from app.db import open_pool
from app.ui_session import SECRET_KEY_FILE, shared_secret_key
from services import archive, coordinators, health, workload_registry
from services.auth import KnownPrincipals
from services.runtime import Limits, Runtime
from services.wakeups import Wakeups
from services.workloads import Workloads

logger = logging.getLogger(__name__)

# How long a starting coordinator waits for the database to read its workloads (then it starts
# with the settings' workloads, and reads the table once the database answers).
STARTUP_WORKLOADS_SECONDS = 2.0


def init_app(app: Flask, settings: Settings, *, storage_fatal: bool = True) -> Runtime:
    """Check storage, open the pool, start the NOTIFY listener; close both when the process ends."""
    store = archive_for(settings)
    _warn_about_storage(settings, store, fatal=storage_fatal)
    coordinator = describe_coordinator(settings)
    principals = KnownPrincipals(settings.auth_cache_seconds)
    pool = open_pool(settings)
    workloads = workloads_for(settings.limits)
    reloader = workload_registry.Reloader(
        pool, workloads, workload_registry.seed_caps(settings.limits)
    )
    # When the listener's connection breaks, the pool's idle ones most likely broke with it
    # (a restart, pg_terminate_backend): testing them then, and again once the listener is
    # back, spares a request a dead one, and its 503.
    wakeups = Wakeups(
        settings.database_url,
        credentials_changed=principals.forget_all,
        recheck_connections=pool.check,
        max_waiting=settings.max_waiting_requests,
        workloads_changed=reloader.reload,
    )
    runtime = Runtime(
        pool=pool,
        limits=settings.limits,
        workloads=workloads,
        wakeups=wakeups,
        principals=principals,
        archive_dir=settings.archive_dir,
        temp_dir=settings.temp_dir,
        coordinator=coordinator,
        archive=store,
    )
    _load_workloads(reloader)
    runtime.wakeups.start()
    app.extensions["chunkwise.runtime"] = runtime
    atexit.register(close, runtime)
    return runtime


def workloads_for(limits: Limits) -> Workloads:
    """The workloads the settings allow, with their caps: what is served until the workloads
    table is read (the listener reads it as soon as it connects)."""
    return Workloads(workload_registry.seed_caps(limits), workload_registry.KINDS)


def _load_workloads(reloader: workload_registry.Reloader) -> None:
    # Before the first request, so one never meets the settings' workloads where an operator
    # changed them. Should the database not answer (or its schema be behind), the settings'
    # are served until the listener, once connected, reads the table.
    try:
        reloader.reload(timeout=STARTUP_WORKLOADS_SECONDS)
    except psycopg.Error as exc:
        logger.warning(
            "could not read the workloads table; serving the settings' workloads until it can",
            extra={"event": "workloads_unread", "error": str(exc)[:500]},
        )


def describe_coordinator(settings: Settings) -> coordinators.Coordinator:
    """This process as the other coordinators on its database will see it once it checks in."""
    host = socket.gethostname()
    return coordinators.describe(
        # Random too: every container may be pid 1 under a reused hostname.
        id=f"{host}-{os.getpid()}-{secrets.token_hex(3)}",
        host=host,
        pid=os.getpid(),
        version=importlib.metadata.version("chunkwise"),
        shared_settings=shared_settings(settings),
        # The key ui_session.init_app signs the dashboard's cookies with.
        secret_key=settings.secret_key
        or shared_secret_key(settings.archive_dir.parent / SECRET_KEY_FILE),
        maintenance_seconds=settings.maintenance_seconds,
    )


def archive_for(settings: Settings) -> archive.Archive:
    """The bucket CHUNKWISE_ARCHIVE_URL names, else the local CHUNKWISE_ARCHIVE_DIR."""
    if settings.archive_bucket is None:
        return archive.LocalArchive(settings.archive_dir)
    # Imported only here: a single-host coordinator never loads boto3.
    from services.object_archive import ObjectArchive

    return ObjectArchive(settings.archive_bucket, settings.archive_prefix)


def require_storage(settings: Settings, store: archive.Archive | None = None) -> None:
    """Raise ConfigError unless the temp directory and the archive can be used (creating them)."""
    problems = storage_problems(settings, store or archive_for(settings))
    if problems:
        raise ConfigError(problems)


def storage_problems(settings: Settings, store: archive.Archive) -> list[str]:
    """What keeps the temp directory and the archive from use (creating them), or nothing."""
    paths = {"CHUNKWISE_TEMP_DIR": settings.temp_dir, "CHUNKWISE_ARCHIVE_DIR": settings.archive_dir}
    if settings.archive_bucket is not None:
        paths = {"CHUNKWISE_TEMP_DIR": settings.temp_dir}
    problems = []
    for setting, directory in paths.items():
        try:
            archive.make_private_directory(directory)
        except OSError as exc:
            problems.append(f"{setting}={directory} cannot be created ({archive.errno_name(exc)})")
    if problems:
        return problems
    return [
        f"{p.setting}={_where(settings, paths, p.setting)} {p.problem}"
        for p in health.setup_problems(settings.temp_dir, store)
    ]


def _where(settings: Settings, paths: dict, setting: str) -> str:
    if setting in paths:
        return str(paths[setting])
    return f"s3://{settings.archive_bucket}/{settings.archive_prefix}"


def _warn_about_storage(settings: Settings, store: archive.Archive, *, fatal: bool) -> None:
    # Under gunicorn the master checks storage once at start (gunicorn.conf.py) and refuses to
    # start; a worker process booting later must not refuse, or gunicorn would stop the whole
    # coordinator (a worker that fails to boot ends the master) and with it the worker
    # protocol and job reads. It starts, says why, and /readyz answers 503 meanwhile.
    if fatal:
        require_storage(settings, store)
    problems = storage_problems(settings, store)
    for problem in problems:
        logger.error(
            f"{problem}; uploads fail until it is mended", extra={"event": "storage_unusable"}
        )
    if problems:
        return
    # A full disk is a condition, not a setting: the process starts either way.
    paths = {"CHUNKWISE_TEMP_DIR": settings.temp_dir, "CHUNKWISE_ARCHIVE_DIR": settings.archive_dir}
    for p in health.space_problems(settings.temp_dir, store, settings.limits.max_upload_bytes):
        logger.warning(
            f"{p.setting}={paths[p.setting]} {p.problem}; uploads may fail until there is room",
            extra={"event": "storage_low", "setting": p.setting},
        )


def close(runtime: Runtime) -> None:
    """Stop the maintenance loop and the listener, then close the pool (graceful shutdown)."""
    runtime.stopping.set()
    runtime.schedules_changed.set()
    runtime.wakeups.stop()
    try:
        # At once, rather than its row counting until it expires.
        coordinators.check_out(runtime)
    except Exception as exc:
        logger.warning(
            "could not remove this coordinator's row; it expires by itself",
            extra={"event": "coordinator_check_out_failed", "error": str(exc)[:500]},
        )
    runtime.pool.close()


def get_runtime() -> Runtime:
    """The current app's Runtime."""
    return current_app.extensions["chunkwise.runtime"]
