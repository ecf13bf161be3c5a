"""Liveness and readiness probes."""

from __future__ import annotations

from flask import Blueprint, current_app

from app.runtime import get_runtime
from services import health

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz():
    """The process is alive."""
    return {"status": "ok"}


@bp.get("/readyz")
def readyz():
    """Storage takes an upload, the database answers, every migration this code needs is in."""
    health.require_ready(get_runtime(), current_app.config["CHUNKWISE_MIGRATIONS"])
    return {"status": "ready", "missing_migrations": []}
