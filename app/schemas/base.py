"""The bases of every response body and of every error response."""

from __future__ import annotations

from marshmallow import Schema, fields


class ResponseSchema(Schema):
    """Base of every JSON response body: app/tracing.py adds the request's trace id to it."""

    trace_id = fields.Str(metadata={"description": "the request's trace id, as in X-Trace-Id"})


class ErrorBodySchema(Schema):
    """The error object."""

    code = fields.Str(required=True)
    message = fields.Str(required=True)
    details = fields.Dict(required=True)


class ErrorSchema(ResponseSchema):
    """Every error response."""

    error = fields.Nested(ErrorBodySchema, required=True)
    trace_id = fields.Str(required=True)
