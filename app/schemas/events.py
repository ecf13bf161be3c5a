"""The event feed: its query and its pages of outbox events."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from app.input_rules import Int, RequestSchema
from app.schemas.base import ResponseSchema
from services.jobs import EVENT_TYPES


class EventQuerySchema(RequestSchema):
    """Query parameters of the event feed."""

    after = Int(
        minimum=0,
        column="bigint",
        load_default=0,
        metadata={"description": "the id of the last event read: the last page's next_after"},
    )
    limit = Int(minimum=1, maximum=1000, load_default=100)
    job_id = fields.UUID(load_default=None, metadata={"description": "only this job's events"})
    types = fields.List(
        fields.Str(validate=validate.OneOf(EVENT_TYPES)),
        data_key="type",
        load_default=None,
        validate=validate.Length(max=len(EVENT_TYPES)),
        metadata={"description": "only these events (repeat it for several); none: every one"},
    )


class EventSchema(Schema):
    """One outbox event."""

    id = fields.Int()
    job_id = fields.UUID()
    event = fields.Str()
    payload = fields.Dict()
    trace_id = fields.Str()
    created_at = fields.DateTime()


class EventListSchema(ResponseSchema):
    """Events in order."""

    events = fields.List(fields.Nested(EventSchema))
    next_after = fields.Int()
