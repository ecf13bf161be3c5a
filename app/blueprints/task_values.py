"""What the coordinator stores for a task, read by its job's owner: the stored result value."""

from __future__ import annotations

from uuid import UUID

from flask import Blueprint, Response

from app import auth
from app.auth import current_principal
from app.runtime import get_runtime
from services import task_values

bp = Blueprint("task_values", __name__, url_prefix="/api/v1/tasks")
bp.before_request(auth.users_only)


@bp.get("/<uuid:task_id>/result")
def stored_result(task_id: UUID):
    """A task's stored result value: the canonical JSON bytes its result_sha256 digests."""
    text = task_values.stored_result(get_runtime(), current_principal(), task_id)
    return Response(text.encode(), mimetype="application/json")
