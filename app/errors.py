"""The one table from exceptions to HTTP statuses, and the JSON error body."""

from __future__ import annotations

import logging
from uuid import UUID

import psycopg
import psycopg_pool
from flask import Flask, jsonify, request
from marshmallow import ValidationError
from werkzeug.exceptions import HTTPException

from services import metrics
from services.errors import (
    ChunkwiseError,
    Conflict,
    Forbidden,
    InvalidInput,
    LeaseLost,
    NotFound,
    PayloadTooLarge,
    QueueFull,
    QuotaExceeded,
    RangeNotSatisfiable,
    StorageFull,
    StorageUnavailable,
    Unauthenticated,
    Unavailable,
)
from services.tasks import CompletionOutcome, RenewalOutcome

logger = logging.getLogger(__name__)

STATUS: dict[type[ChunkwiseError], int] = {
    Unauthenticated: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,  # also LeaseLost: lease_lost, stale_attempt, task_cancelled, timed_out
    PayloadTooLarge: 413,
    RangeNotSatisfiable: 416,
    InvalidInput: 422,
    QueueFull: 429,
    QuotaExceeded: 429,  # user_quota_exceeded: past the caller's share of the workload
    StorageUnavailable: 500,  # a directory is missing, read-only, refused or not a directory
    Unavailable: 503,
    # Out of space is 507, not 503: no Retry-After, because only an operator can free space.
    StorageFull: 507,
}
RETRY_AFTER_UNAVAILABLE = 2


def error_response(status: int, code: str, message: str, details: dict | None = None):
    """Build the error body every failure uses."""
    response = jsonify({"error": {"code": code, "message": message, "details": details or {}}})
    response.status_code = status
    return response


def status_of(exc: ChunkwiseError) -> int:
    """The HTTP status of a service's error: its own class's, else its nearest base's."""
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def outcome_of(outcome: CompletionOutcome) -> dict:
    """One result of a batch, with the status and error the single endpoint would answer, as
    its JSON object: ResultOutcomeSchema's fields in its order, without a dump (a batch answers
    a hundred; tests/unit/test_batch_answers.py holds it to the schema)."""
    if outcome.error is not None:
        return _rejected(outcome.task_id, outcome.error)
    label = "replayed" if outcome.replayed else "accepted"
    return {"task_id": str(outcome.task_id), "outcome": label, "status": 200, "error": None}


def renewal_of(outcome: RenewalOutcome) -> dict:
    """One heartbeat of a batch, with the status and error the single endpoint would answer,
    as its JSON object: RenewalOutcomeSchema's fields in its order, without a dump."""
    if outcome.error is not None:
        rejected = _rejected(outcome.task_id, outcome.error)
        error = rejected.pop("error")
        return {**rejected, "lease_expires_at": None, "error": error}
    return {
        "task_id": str(outcome.task_id),
        "outcome": "renewed",
        "status": 200,
        "lease_expires_at": outcome.lease_expires_at.isoformat(),
        "error": None,
    }


def error_body(exc: ChunkwiseError) -> dict:
    """The error object of a refusal, as ErrorBodySchema has it."""
    return {"code": exc.code, "message": exc.message, "details": exc.details}


def _rejected(task_id: UUID, exc: ChunkwiseError) -> dict:
    if isinstance(exc, LeaseLost):
        metrics.FENCED_WRITES.labels(request.endpoint or "", exc.code).inc()
    error = error_body(exc)
    status = status_of(exc)
    return {"task_id": str(task_id), "outcome": "rejected", "status": status, "error": error}


def http_error(exc: HTTPException):
    """Werkzeug's refusals (404, 405, 413, a malformed body) in the error body."""
    code = {400: "malformed_request", 413: "payload_too_large"}.get(
        exc.code, (exc.name or "error").lower().replace(" ", "_")
    )
    response = error_response(exc.code or 500, code, exc.description or exc.name)
    # Keep what the exception says beyond the body, such as Allow on a 405.
    for name, value in exc.get_headers():
        if name.lower() != "content-type":
            response.headers[name] = value
    return response


def log_storage_failure(exc: StorageFull | StorageUnavailable) -> None:
    """Log a storage failure with the path the answer leaves out."""
    cause = exc.__cause__
    logger.error(
        "storage write failed",
        extra={
            "event": "storage_error",
            "error_code": exc.code,
            **exc.details,
            "path": getattr(cause, "filename", None),
            "error": str(cause or exc),
        },
    )


def init_app(app: Flask) -> None:
    """Register the handlers."""

    @app.errorhandler(ChunkwiseError)
    def service_error(exc: ChunkwiseError):
        response = error_response(status_of(exc), exc.code, exc.message, exc.details)
        if isinstance(exc, LeaseLost):
            metrics.FENCED_WRITES.labels(request.endpoint or "", exc.code).inc()
        if isinstance(exc, QueueFull):
            metrics.ADMISSION_REJECTIONS.inc()
            response.headers["Retry-After"] = str(exc.retry_after)
        if isinstance(exc, Unavailable):
            response.headers["Retry-After"] = str(RETRY_AFTER_UNAVAILABLE)
        if isinstance(exc, RangeNotSatisfiable):
            response.headers["Content-Range"] = f"bytes */{exc.details['length']}"
        if isinstance(exc, StorageFull | StorageUnavailable):
            log_storage_failure(exc)
        return response

    @app.errorhandler(ValidationError)
    def validation_error(exc: ValidationError):
        fields = exc.messages if isinstance(exc.messages, dict) else {"_body": exc.messages}
        names = ", ".join(sorted(str(k) for k in fields))
        return error_response(422, "invalid_input", f"invalid fields: {names}", {"fields": fields})

    app.register_error_handler(HTTPException, http_error)

    @app.errorhandler(psycopg_pool.PoolTimeout)
    @app.errorhandler(psycopg.OperationalError)
    def database_unavailable(exc: Exception):
        # QueryCanceled (statement_timeout) is an OperationalError too.
        logger.warning(
            "database unavailable", extra={"event": "db_unavailable", "error": str(exc)[:500]}
        )
        return service_error(Unavailable("the database is unavailable or too slow; retry shortly"))

    @app.errorhandler(psycopg.DataError)
    @app.errorhandler(psycopg.errors.ProgramLimitExceeded)
    @app.errorhandler(UnicodeEncodeError)
    def unstorable_value(exc: Exception):
        # A backstop: app/input_rules.py should refuse such input first. DataError is SQLSTATE
        # class 22 (out of range, NUL in text, bad JSON text); ProgramLimitExceeded, class 54,
        # an OperationalError that is no outage (a value too large for an index row); a
        # UnicodeEncodeError is a lone surrogate the driver could not send.
        sqlstate = getattr(exc, "sqlstate", None)
        logger.warning(
            "value refused by the database",
            extra={"event": "unstorable_value", "sqlstate": sqlstate, "error": str(exc)[:500]},
        )
        return error_response(
            422,
            "invalid_input",
            "a value in the request cannot be stored (out of range, too large, NUL or unpaired"
            " surrogate)",
            {"sqlstate": sqlstate} if sqlstate else {},
        )

    @app.errorhandler(Exception)
    def unexpected(exc: Exception):
        logger.exception("unhandled error", extra={"event": "internal_error"})
        return error_response(500, "internal_error", "internal error; the trace id finds the log")
