"""The outbox as a feed: job and chunk events, in an order no later commit can go back on."""

from __future__ import annotations

from flask import Blueprint, request

from app import auth, input_rules
from app.auth import current_principal
from app.runtime import get_runtime
from app.schemas import events as event_schemas
from services import jobs

bp = Blueprint("events", __name__, url_prefix="/api/v1/events")
bp.before_request(auth.users_only)

# Built once: building a schema deep-copies every field it declares.
EVENT_QUERY = event_schemas.EventQuerySchema()
EVENT_LIST = event_schemas.EventListSchema()


@bp.get("")
def list_events():
    """Events after `after`, oldest first (of the types named, if any)."""
    query = EVENT_QUERY.load(input_rules.single_values(request.args, lists=("type",)))
    return EVENT_LIST.dump(jobs.list_events(get_runtime(), current_principal(), **query))
