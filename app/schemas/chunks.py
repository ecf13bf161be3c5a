"""A job's chunks: the page query, each chunk's summary and full view, and its attempts."""

from __future__ import annotations

from marshmallow import Schema, fields

from app.input_rules import Int, RequestSchema
from app.schemas.base import ResponseSchema
from app.schemas.field_rules import NULLABLE_DATETIME, NULLABLE_INTEGER, NULLABLE_OBJECT
from app.schemas.tasks import retry_time
from services.csvjobs import WORKLOAD as CSV_WORKLOAD


class ChunkPageQuerySchema(RequestSchema):
    """Query parameters of a page of a job's chunks, or of its results, in chunk order."""

    after = Int(
        minimum=-1,
        load_default=-1,
        metadata={"description": "the chunk_index the previous page ended at (-1: the first)"},
    )
    limit = Int(minimum=1, maximum=1000, load_default=1000)


class AttemptSchema(Schema):
    """One attempt at a chunk."""

    attempt_id = fields.UUID(attribute="id")
    attempt = fields.Int()
    worker_id = fields.Str()
    state = fields.Method("_state", metadata={"type": "string"})
    trace_id = fields.Str()
    started_at = fields.DateTime(attribute="leased_at")
    finished_at = fields.DateTime(allow_none=True)
    error = fields.Method("_error", metadata=NULLABLE_OBJECT)

    def _state(self, attempt):
        return attempt.outcome or "running"

    def _error(self, attempt):
        if attempt.error_code is None:
            return None
        return {"code": attempt.error_code, "message": attempt.error_message}


class ChunkSummarySchema(ResponseSchema):
    """A chunk as a job's chunk list shows it, with its attempts (dumped from
    services.chunks.ChunkView): no metrics or checkpoint, and the error only as its code and
    message; the chunk's own view, GET /api/v1/jobs/{id}/chunks/{chunk_id}, has them."""

    id = fields.UUID(attribute="task.id")
    index = fields.Int(attribute="task.chunk_index")
    record_start = fields.Int(attribute="task.record_start", allow_none=True)
    record_end = fields.Int(attribute="task.record_end", allow_none=True)
    state = fields.Str(attribute="task.status")
    attempt = fields.Int(attribute="task.attempt")
    max_attempts = fields.Int(attribute="task.max_attempts")
    lease_owner = fields.Str(attribute="task.lease_owner", allow_none=True)
    lease_expires_at = fields.DateTime(attribute="task.lease_expires_at", allow_none=True)
    deadline = fields.Method("_deadline", metadata=NULLABLE_DATETIME)
    input_sha256 = fields.Str(attribute="task.input_sha256")
    result_uri = fields.Str(attribute="task.result_uri", allow_none=True)
    result_sha256 = fields.Str(attribute="task.result_sha256", allow_none=True)
    summary = fields.Dict(allow_none=True)
    attempts = fields.List(fields.Nested(AttemptSchema))
    error = fields.Method("_error", metadata=NULLABLE_OBJECT)
    not_before = fields.Method("_not_before", metadata=NULLABLE_DATETIME)

    def _not_before(self, view):
        return retry_time(view.task)

    def _deadline(self, view):
        # Only the running attempt's: a claim sets it afresh for each.
        t = view.task
        return t.deadline.isoformat() if t.status == "leased" and t.deadline else None

    def _error(self, view):
        t = view.task
        if t.error_code is None or t.status == "completed":
            return None
        return {"code": t.error_code, "message": t.error_message}


class ChunkSchema(ChunkSummarySchema):
    """A chunk of a job with its attempts (dumped from services.chunks.ChunkView)."""

    record_start = fields.Method("_record_start", metadata=NULLABLE_INTEGER)
    record_end = fields.Method("_record_end", metadata=NULLABLE_INTEGER)
    metrics = fields.Dict(attribute="task.metrics", allow_none=True)
    checkpoint = fields.Dict(attribute="task.checkpoint", allow_none=True)

    def _record_start(self, view):
        return _csv_parameter(view.task, "record_start")

    def _record_end(self, view):
        return _csv_parameter(view.task, "record_end")

    def _error(self, view):
        error = super()._error(view)
        return error and {**error, "details": view.task.error_details}


def _csv_parameter(task, name: str) -> int | None:
    """A CSV chunk's record bound; a manifest task's parameters may use the name for anything."""
    return task.parameters.get(name) if task.workload == CSV_WORKLOAD else None


class ChunkListSchema(ResponseSchema):
    """A page of a job's chunks, each as its summary, and where the next page starts."""

    chunks = fields.List(fields.Nested(ChunkSummarySchema))
    next_after = fields.Int()
