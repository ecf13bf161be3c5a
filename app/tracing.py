"""Trace ids: adopted from a W3C traceparent or made up, on every log line and response."""

from __future__ import annotations

import json
import re
import uuid

from flask import Flask, Response, g, request

from app.schemas import check_header
from services import logcontext

TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")


def trace_id_from(traceparent: str | None) -> str:
    """Return the trace id of a valid traceparent, else a new one."""
    match = TRACEPARENT.match((traceparent or "").strip().lower())
    if match and match.group(1) != "0" * 32:
        return match.group(1)
    return uuid.uuid4().hex


def current_trace_id() -> str:
    """The trace id of the request being handled."""
    return g.trace_id


def init_app(app: Flask) -> None:
    """Give every request a trace id, and every response the header and JSON bodies the field.

    Only application/json bodies get the field: the OpenAPI document, served as its own media
    type, stays a clean document.
    """

    @app.before_request
    def begin_trace() -> None:
        g.trace_id = trace_id_from(request.headers.get("traceparent"))
        logcontext.begin(trace_id=g.trace_id)
        # Any other malformed traceparent only starts a new trace (W3C), but a NUL in a field
        # value must be refused (RFC 9110 5.5), and the refusal carries the fresh trace id.
        check_header("traceparent")

    @app.after_request
    def stamp_trace(response: Response) -> Response:
        trace_id = g.get("trace_id") or uuid.uuid4().hex
        response.headers["X-Trace-Id"] = trace_id
        if response.mimetype == "application/json" and not response.is_streamed:
            body = response.get_json(silent=True)
            if isinstance(body, dict) and "trace_id" not in body:
                body["trace_id"] = trace_id
                response.set_data(json.dumps(body))
        return response
