"""Trace ids: adopted from a W3C traceparent or made up, on every log line and response."""

from __future__ import annotations

import re
import uuid

from flask import Flask, Response, g, request
from flask.json.provider import DefaultJSONProvider

from app.input_rules import check_header
from services import logcontext

# W3C Trace Context: lowercase hex; a version after 00 may carry fields this one does not read.
TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-.*)?")


def trace_id_from(traceparent: str | None) -> str:
    """Return the trace id of a valid traceparent, else a new one."""
    match = TRACEPARENT.fullmatch((traceparent or "").strip())
    if match:
        version, trace_id, parent_id, more = match.groups()
        # Version ff and all-zero ids are invalid, and version 00 has exactly four fields.
        valid = version != "ff" and not (version == "00" and more)
        if valid and trace_id != "0" * 32 and parent_id != "0" * 16:
            return trace_id
    return uuid.uuid4().hex


def current_trace_id() -> str:
    """The trace id of the request being handled (made up if the request has none yet)."""
    if "trace_id" not in g:
        g.trace_id = uuid.uuid4().hex
    return g.trace_id


class TracedJSONProvider(DefaultJSONProvider):
    """JSON bodies in schema order, each object naming the request's trace id."""

    # The bodies are marshmallow dumps, already in their schemas' declared order.
    sort_keys = False

    def response(self, *args, **kwargs) -> Response:
        """Serialise a view's or an error's body, adding trace_id to an object without one."""
        body = args[0] if len(args) == 1 and not kwargs else None
        if isinstance(body, dict) and "trace_id" not in body:
            args = ({**body, "trace_id": current_trace_id()},)
        return super().response(*args, **kwargs)


def init_app(app: Flask) -> None:
    """Give every request a trace id, and every response the header and JSON bodies the field.

    The field is added as Flask serialises a body (never by parsing a response back), so only
    application/json bodies get it: the OpenAPI document, served as its own media type, stays
    a clean document.
    """
    app.json = TracedJSONProvider(app)

    @app.before_request
    def begin_trace() -> None:
        g.trace_id = trace_id_from(request.headers.get("traceparent"))
        logcontext.begin(trace_id=g.trace_id)
        # Any other malformed traceparent only starts a new trace (W3C), but a NUL in a field
        # value must be refused (RFC 9110 5.5), and the refusal carries the fresh trace id.
        check_header("traceparent")

    @app.after_request
    def stamp_trace(response: Response) -> Response:
        response.headers["X-Trace-Id"] = current_trace_id()
        return response
