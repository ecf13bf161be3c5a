"""The OpenAPI 3 document, generated from the routes and the same marshmallow schemas."""

from __future__ import annotations

import json
import re

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from flask import Blueprint, Flask, Response, current_app
from marshmallow import fields

from app import auth
from app.schemas import base as base_schemas
from app.schemas import chunks as chunk_schemas
from app.schemas import events as event_schemas
from app.schemas import health as health_schemas
from app.schemas import jobs as job_schemas
from app.schemas import queue as queue_schemas
from app.schemas import schedules as schedule_schemas
from app.schemas import tasks as task_schemas
from services import schedules

bp = Blueprint("openapi", __name__)
bp.before_request(auth.any_token)

# The registered media type of the document. tracing.py stamps trace_id only into
# application/json bodies, so the document stays a clean OpenAPI document.
MEDIA_TYPE = "application/vnd.oai.openapi+json"


class CsvJobUploadSchema(job_schemas.CsvJobFormSchema):
    """The multipart form of a CSV job: the form fields and the file part."""

    file = fields.Raw(required=True, metadata={"type": "string", "format": "binary"})


# endpoint -> (request schema, response schema, statuses beyond those every route of its kind
# can give; see _statuses). A request schema is the query of a GET and the JSON body otherwise.
DOCUMENTED: dict[str, tuple[type | None, type | None, tuple[int, ...]]] = {
    "health.healthz": (None, health_schemas.HealthSchema, ()),
    "health.readyz": (None, health_schemas.HealthSchema, (503,)),
    "openapi.document": (None, None, ()),
    # 500 storage_unavailable and 507 insufficient_storage: a CSV upload that cannot be stored;
    # 414: a text/csv upload's query string too long for gunicorn.
    "jobs.create_job": (
        job_schemas.JobCreateSchema,
        job_schemas.JobSchema,
        (201, 409, 414, 429, 500, 507),
    ),
    "jobs.list_jobs": (job_schemas.JobListQuerySchema, job_schemas.JobListSchema, ()),
    "jobs.get_job": (job_schemas.JobWaitQuerySchema, job_schemas.JobSchema, (304, 404)),
    "jobs.list_results": (job_schemas.ResultPageQuerySchema, job_schemas.ResultListSchema, (404,)),
    "task_values.stored_result": (None, None, (404,)),
    "jobs.cancel_job": (None, job_schemas.JobSchema, (404, 409)),
    "jobs.cancel_jobs": (job_schemas.JobCancelSchema, job_schemas.JobCancelResultSchema, ()),
    "jobs.retry_job": (None, job_schemas.JobSchema, (404, 409, 429)),
    "chunks.list_chunks": (
        chunk_schemas.ChunkPageQuerySchema,
        chunk_schemas.ChunkListSchema,
        (404,),
    ),
    "chunks.get_chunk": (None, chunk_schemas.ChunkSchema, (404,)),
    "events.list_events": (event_schemas.EventQuerySchema, event_schemas.EventListSchema, ()),
    "queue.queue_status": (None, queue_schemas.QueueSchema, ()),
    "queue.list_workers": (None, queue_schemas.WorkerListSchema, ()),
    "queue.list_workloads": (None, queue_schemas.WorkloadListSchema, ()),
    "queue.add_workload": (
        queue_schemas.WorkloadAddSchema,
        queue_schemas.WorkloadSchema,
        (201, 409),
    ),
    "queue.get_workload": (None, queue_schemas.WorkloadSchema, (404,)),
    "queue.change_workload": (
        queue_schemas.WorkloadChangeSchema,
        queue_schemas.WorkloadSchema,
        (404,),
    ),
    "queue.remove_workload": (None, None, (204, 404, 409)),
    "queue.pause_workload": (None, queue_schemas.WorkloadSchema, (404,)),
    "queue.resume_workload": (None, queue_schemas.WorkloadSchema, (404,)),
    "tasks.claim": (task_schemas.ClaimSchema, task_schemas.ClaimResponseSchema, (204,)),
    "tasks.read_input": (task_schemas.LeaseSchema, None, (206, 404, 409, 416)),
    "tasks.heartbeat": (task_schemas.HeartbeatSchema, task_schemas.LeaseRenewedSchema, (404, 409)),
    "tasks.heartbeats": (
        task_schemas.HeartbeatBatchSchema,
        task_schemas.HeartbeatBatchResponseSchema,
        (),
    ),
    "tasks.result": (task_schemas.ResultSchema, task_schemas.TaskSchema, (404, 409)),
    "tasks.results": (task_schemas.ResultBatchSchema, task_schemas.ResultBatchResponseSchema, ()),
    "tasks.failure": (task_schemas.FailureSchema, task_schemas.TaskSchema, (404, 409)),
    "schedules.put_schedule": (
        schedule_schemas.SchedulePutSchema,
        schedule_schemas.ScheduleSchema,
        (201, 409),
    ),
    "schedules.list_schedules": (None, schedule_schemas.ScheduleListSchema, ()),
    "schedules.get_schedule": (None, schedule_schemas.ScheduleSchema, (404,)),
    "schedules.delete_schedule": (None, None, (204, 404)),
    "schedules.run_schedule": (None, job_schemas.JobSchema, (201, 404, 409, 429)),
    "schedules.pause_schedule": (None, schedule_schemas.ScheduleSchema, (404,)),
    "schedules.resume_schedule": (None, schedule_schemas.ScheduleSchema, (404,)),
}
# Answered 204 on success, never 200.
NO_CONTENT_ENDPOINTS = {"schedules.delete_schedule", "queue.remove_workload"}
QUERY_METHODS = {"GET"}
# Routes naming one schedule, which take ?owner= whatever their method.
OWNER_ENDPOINTS = {
    "schedules.put_schedule",
    "schedules.get_schedule",
    "schedules.run_schedule",
    "schedules.pause_schedule",
    "schedules.resume_schedule",
    "schedules.delete_schedule",
}
# Every path parameter is an id but a schedule's name and a workload's.
PATH_SCHEMAS = {
    "workload": {"type": "string", "minLength": 1, "maxLength": 100},
    "job_id": {"type": "string", "format": "uuid"},
    "chunk_id": {"type": "string", "format": "uuid"},
    "task_id": {"type": "string", "format": "uuid"},
    "name": {"type": "string", "pattern": schedules.NAME_PATTERN},
}
# Responses that carry the job's version (app/blueprints/jobs.py _etag).
ETAG_ENDPOINTS = {"jobs.create_job", "jobs.get_job"}

CSV_FILE = {"type": "string", "format": "binary"}

TRACE_HEADER = {
    "description": "the request's trace id: its traceparent's, else a new one",
    "required": True,
    "schema": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
}
ETAG_HEADER = {"description": "the job's version", "required": True, "schema": {"type": "string"}}
RETRY_AFTER_HEADER = {
    "description": "seconds to wait before trying again",
    "required": True,
    "schema": {"type": "integer"},
}
# Only on a long poll answered at once because its process had no waiting place free.
WAIT_REFUSED_HEADER = {
    "description": "no waiting place was free: seconds to wait before polling again",
    "required": False,
    "schema": {"type": "integer"},
}
ERROR_DESCRIPTIONS = {
    400: "malformed: not a JSON object, not UTF-8, nested too deep, or a form cut short",
    401: "no valid bearer token",
    403: "this kind of token may not call this route, or a user named another's schedule",
    404: "no such resource, or not the caller's",
    409: "conflicts with the current state (the error code says which)",
    413: "the body or upload is larger than the limit",
    415: "the body's Content-Type is not one the route reads",
    416: "range_not_satisfiable: the Range starts at or past the end; Content-Range has the size",
    422: "invalid fields, named in details.fields",
    429: "queue_full, or user_quota_exceeded (the caller's share of the workload, "
    "CHUNKWISE_USER_MAX_*); Retry-After says when to try again",
    500: "storage_unavailable: the upload's directory is missing, read-only or refused",
    503: "the database is unavailable or too slow (or, reading a task's input, the archive: "
    "input_not_here, storage_unavailable); Retry-After says when to try again",
    507: "insufficient_storage: no space left for the upload; no Retry-After",
}
# Answered by gunicorn before the app sees the request (gunicorn.conf.py): no trace id.
REQUEST_LINE_TOO_LONG = {
    "description": "the path and query are over 8,190 bytes (gunicorn's limit_request_line); "
    "send long columns and labels in a multipart form instead",
    "content": {"application/json": {"schema": "Error"}},
}
TRACEPARENT_PARAMETER = {
    "in": "header",
    "name": "traceparent",
    "required": False,
    "description": "W3C trace context; a malformed one starts a new trace, a NUL gets 422",
    "schema": {"type": "string"},
}
IDEMPOTENCY_KEY_PARAMETER = {
    "in": "header",
    "name": "Idempotency-Key",
    "required": False,
    "description": "a retry with the same key and body returns the original job (200)",
    "schema": {"type": "string", "minLength": 1, "maxLength": 200},
}
LEASE_TOKEN_PARAMETER = {
    "in": "header",
    "name": task_schemas.LEASE_TOKEN_HEADER,
    "required": True,
    "description": "the lease_token the claim returned with this task; a missing or malformed "
    "one is 422, another lease's is 409 lease_lost",
    "schema": {"type": "string", **task_schemas.LEASE_TOKEN["metadata"]},
}
IF_NONE_MATCH_PARAMETER = {
    "in": "header",
    "name": "If-None-Match",
    "required": False,
    "description": "the ETags already known: 304 while one is current, up to wait_seconds; "
    "* is 304 at once",
    "schema": {"type": "string"},
}


RANGE_PARAMETER = {
    "in": "header",
    "name": "Range",
    "required": False,
    "description": "bytes=FIRST- or bytes=FIRST-LAST: resume a cut read (206 with Content-Range)",
    "schema": {"type": "string"},
}


def _statuses(endpoint: str, path: str, has_body: bool) -> list[int]:
    """Every status the route can answer with: its own and those of its kind of route."""
    own = DOCUMENTED[endpoint][2]
    statuses = {*own, 422}  # 422: a traceparent with a NUL, on any route
    if endpoint not in NO_CONTENT_ENDPOINTS:
        statuses.add(200)
    if path.startswith("/api/v1/"):
        statuses |= {401, 403, 503}  # the token is looked up in PostgreSQL
    if has_body:
        statuses |= {400, 413, 415}
    return sorted(statuses)


def _response(endpoint: str, status: int, response_schema) -> dict:
    if status == 414:
        return REQUEST_LINE_TOO_LONG
    headers: dict = {"X-Trace-Id": "TraceId"}
    if status >= 400:
        if status in (429, 503):
            headers["Retry-After"] = "RetryAfter"
        return {
            "description": ERROR_DESCRIPTIONS[status],
            "headers": headers,
            "content": {"application/json": {"schema": "Error"}},
        }
    if endpoint in ETAG_ENDPOINTS and status in (200, 201, 304):
        headers["ETag"] = "ETag"
    if status == 204 and endpoint in NO_CONTENT_ENDPOINTS:
        return {"description": "deleted", "headers": headers}
    # A long poll beyond the process's waiting budget is answered at once, with Retry-After.
    if status == 204:
        return {
            "description": "no task was leased within wait_seconds (at once, with Retry-After, "
            "when no waiting place was free)",
            "headers": {**headers, "Retry-After": "WaitRefused"},
        }
    if status == 304:
        return {
            "description": "not modified: If-None-Match is current (at once, with Retry-After, "
            "when no waiting place was free)",
            "headers": {**headers, "Retry-After": "WaitRefused"},
        }
    description = {201: "created", 206: "the bytes of the Range asked for"}.get(status, "OK")
    if endpoint in ("jobs.create_job", "schedules.run_schedule") and status == 200:
        description = "the original job of an idempotent retry"
    if endpoint == "tasks.read_input":
        content = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
    elif endpoint == "task_values.stored_result":
        # The stored canonical JSON bytes: result_sha256 is their digest.
        content = {"application/json": {"schema": {}}}
    elif endpoint == "openapi.document":
        content = {MEDIA_TYPE: {"schema": {"type": "object"}}}
    else:
        content = {"application/json": {"schema": response_schema}}
    return {"description": description, "headers": headers, "content": content}


def _request_body(endpoint: str, request_schema) -> dict:
    content = {"application/json": {"schema": request_schema}}
    if endpoint == "jobs.create_job":
        # A CSV job's file is the whole body (parameters in the query string) or a form part.
        content["text/csv"] = {"schema": CSV_FILE}
        content["multipart/form-data"] = {
            "schema": CsvJobUploadSchema,
            # label repeats, one part per key=value
            "encoding": {"label": {"style": "form", "explode": True}},
        }
    return {"required": True, "content": content}


def build_spec(app: Flask) -> dict:
    """Describe every documented route of the app."""
    marshmallow = MarshmallowPlugin()
    spec = APISpec(title="Chunkwise", version="1", openapi_version="3.0.3", plugins=[marshmallow])
    spec.components.security_scheme("bearer", {"type": "http", "scheme": "bearer"})
    spec.components.schema("Error", schema=base_schemas.ErrorSchema)
    spec.components.header("TraceId", TRACE_HEADER)
    spec.components.header("ETag", ETAG_HEADER)
    spec.components.header("RetryAfter", RETRY_AFTER_HEADER)
    spec.components.header("WaitRefused", WAIT_REFUSED_HEADER)
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        if rule.endpoint not in DOCUMENTED:
            continue
        request_schema, response_schema, _ = DOCUMENTED[rule.endpoint]
        view = app.view_functions[rule.endpoint]
        path = re.sub(r"<(?:[a-z_]+:)?([a-z_]+)>", r"{\1}", rule.rule)
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            in_query = request_schema is not None and method in QUERY_METHODS
            has_body = request_schema is not None and not in_query
            parameters: list = [
                {"in": "path", "name": arg, "required": True, "schema": PATH_SCHEMAS[arg]}
                for arg in sorted(rule.arguments)
            ]
            if in_query:
                parameters.append({"in": "query", "schema": request_schema})
            if rule.endpoint == "tasks.results":
                parameters.append({"in": "query", "schema": task_schemas.ResultBatchQuerySchema})
            if rule.endpoint in OWNER_ENDPOINTS:
                parameters.append(
                    {"in": "query", "schema": schedule_schemas.ScheduleOwnerQuerySchema}
                )
            parameters.append(TRACEPARENT_PARAMETER)
            if rule.endpoint in ("jobs.create_job", "schedules.run_schedule"):
                parameters.append(IDEMPOTENCY_KEY_PARAMETER)
            if rule.endpoint == "jobs.get_job":
                parameters.append(IF_NONE_MATCH_PARAMETER)
            if rule.endpoint == "tasks.read_input":
                parameters.append(LEASE_TOKEN_PARAMETER)
                parameters.append(RANGE_PARAMETER)
            operation: dict = {
                "operationId": rule.endpoint,
                "summary": (view.__doc__ or "").strip().splitlines()[0],
                "parameters": parameters,
                "responses": {
                    str(status): _response(rule.endpoint, status, response_schema)
                    for status in _statuses(rule.endpoint, path, has_body)
                },
            }
            if has_body:
                operation["requestBody"] = _request_body(rule.endpoint, request_schema)
            if rule.endpoint == "jobs.create_job":
                parameters += _csv_query_parameters(marshmallow)
            if path.startswith("/api/v1"):
                operation["security"] = [{"bearer": []}]
            spec.path(path=path, operations={method.lower(): operation})
    return spec.to_dict()


def _csv_query_parameters(marshmallow: MarshmallowPlugin) -> list[dict]:
    """The query parameters of a CSV job sent as the text/csv body."""
    parameters = []
    for field_name, field in job_schemas.CsvJobQuerySchema().fields.items():
        # Query parameters cannot depend on the media type: they are optional here, and the
        # ones the form requires are required with a text/csv body.
        when = " (required then)" if field.required else ""
        parameters.append(
            {
                "in": "query",
                "name": field_name,
                "required": False,
                "description": f"with a text/csv body{when}",
                "schema": marshmallow.converter.field2property(field),
            }
        )
    return parameters


@bp.get("/api/v1/openapi.json")
def document():
    """The OpenAPI 3 document of this API."""
    return Response(json.dumps(build_spec(current_app)), mimetype=MEDIA_TYPE)
