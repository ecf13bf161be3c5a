"""The Chunkwise coordinator: a Flask app factory."""

from __future__ import annotations

import os
from collections.abc import Mapping

from flask import Flask

from app import (
    cli,
    errors,
    logs,
    metrics,
    openapi,
    path_ids,
    runtime,
    tracing,
    ui_session,
    uploads,
)
from app.blueprints import (
    chunks,
    events,
    health,
    jobs,
    queue,
    schedules,
    task_values,
    tasks,
    ui,
)
from app.config import load_settings


def create_app(
    test_config: Mapping[str, str] | None = None, *, storage_fatal: bool = True
) -> Flask:
    """Build the coordinator from the environment (test_config overrides variables).

    storage_fatal=False (gunicorn's workers, whose master checked storage at start) boots
    with unusable storage, logging why, rather than refuse.
    """
    settings = load_settings({**os.environ, **(test_config or {})})
    logs.configure(settings.log_level)
    # No app-wide /static: the dashboard's files are served only under /ui/static, with the
    # dashboard's headers (CSP, nosniff, no framing).
    app = Flask(__name__, static_folder=None)
    app.config["CHUNKWISE_SETTINGS"] = settings
    # Imported here, not with the package: `python -m app.migrations` must find it unimported.
    from app.migrations import migration_ids

    app.config["CHUNKWISE_MIGRATIONS"] = migration_ids(settings.migrations_dir)
    rt = runtime.init_app(app, settings, storage_fatal=storage_fatal)
    metrics.init_app(app, rt, settings.metrics_token)
    tracing.init_app(app)
    uploads.init_app(app, settings.temp_dir, settings.limits.max_upload_bytes)
    errors.init_app(app)
    cli.init_app(app)
    ui_session.init_app(app, settings)
    path_ids.init_app(app)  # before the blueprints: their routes use its converter
    blueprints = (
        health.bp,
        jobs.bp,
        chunks.bp,
        tasks.bp,
        task_values.bp,
        events.bp,
        queue.bp,
        schedules.bp,
        openapi.bp,
        ui.bp,
    )
    for blueprint in blueprints:
        app.register_blueprint(blueprint)
    return app
