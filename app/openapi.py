"""The OpenAPI 3 document, generated from the routes and the same marshmallow schemas."""

from __future__ import annotations

import re

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from flask import Blueprint, Flask, current_app

from app import schemas

bp = Blueprint("openapi", __name__)

# endpoint -> (request schema, response schema, extra statuses)
DOCUMENTED: dict[str, tuple[type | None, type | None, tuple[int, ...]]] = {
    "health.healthz": (None, schemas.HealthSchema, ()),
    "health.readyz": (None, schemas.HealthSchema, (503,)),
    "openapi.document": (None, None, (401,)),
    "jobs.create_job": (
        schemas.JobCreateSchema,
        schemas.JobSchema,
        (201, 400, 401, 409, 413, 422, 429),
    ),
    "jobs.list_jobs": (schemas.JobListQuerySchema, schemas.JobListSchema, (401, 422)),
    "jobs.get_job": (schemas.JobWaitQuerySchema, schemas.JobSchema, (304, 401, 404, 422)),
    "jobs.list_results": (None, schemas.ResultListSchema, (401, 404)),
    "jobs.cancel_job": (None, schemas.JobSchema, (401, 404, 409)),
    "jobs.retry_job": (None, schemas.JobSchema, (401, 404, 409)),
    "chunks.list_chunks": (None, schemas.ChunkListSchema, (401, 404)),
    "chunks.get_chunk": (None, schemas.ChunkSchema, (401, 404)),
    "events.list_events": (schemas.EventQuerySchema, schemas.EventListSchema, (401, 422)),
    "queue.queue_status": (None, schemas.QueueSchema, (401, 403)),
    "queue.list_workers": (None, schemas.WorkerListSchema, (401, 403)),
    "tasks.claim": (schemas.ClaimSchema, schemas.ClaimResponseSchema, (204, 401, 403, 422)),
    "tasks.read_input": (schemas.LeaseSchema, None, (401, 403, 409)),
    "tasks.heartbeat": (schemas.HeartbeatSchema, schemas.LeaseRenewedSchema, (401, 403, 409)),
    "tasks.result": (schemas.ResultSchema, schemas.TaskSchema, (401, 403, 409, 422)),
    "tasks.failure": (schemas.FailureSchema, schemas.TaskSchema, (401, 403, 409, 422)),
}
QUERY_METHODS = {"GET"}
# A CSV job's file travels as the whole body (its parameters in the query string) or as a
# multipart form: the media types an endpoint takes beside JSON.
CSV_FILE = {"type": "string", "format": "binary"}
CSV_BODIES = {"jobs.create_job": (schemas.CsvJobFormSchema, schemas.CsvJobQuerySchema)}


def build_spec(app: Flask) -> dict:
    """Describe every documented route of the app."""
    marshmallow = MarshmallowPlugin()
    spec = APISpec(title="Chunkwise", version="1", openapi_version="3.0.3", plugins=[marshmallow])
    spec.components.security_scheme("bearer", {"type": "http", "scheme": "bearer"})
    spec.components.schema("Error", schema=schemas.ErrorSchema)
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        if rule.endpoint not in DOCUMENTED:
            continue
        request_schema, response_schema, statuses = DOCUMENTED[rule.endpoint]
        view = app.view_functions[rule.endpoint]
        path = re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", r"{\1}", rule.rule)
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            operation: dict = {
                "summary": (view.__doc__ or "").strip().splitlines()[0],
                "responses": {"200": {"description": "OK"}},
                "parameters": [
                    {"in": "path", "name": arg, "required": True, "schema": {"type": "string"}}
                    for arg in sorted(rule.arguments)
                ],
            }
            if response_schema is not None:
                operation["responses"]["200"]["content"] = {
                    "application/json": {"schema": response_schema}
                }
            if request_schema is not None and method in QUERY_METHODS:
                operation["parameters"].append({"in": "query", "schema": request_schema})
            elif request_schema is not None:
                operation["requestBody"] = {
                    "content": {"application/json": {"schema": request_schema}}
                }
            if rule.endpoint in CSV_BODIES:
                _add_csv_bodies(spec, marshmallow, operation, *CSV_BODIES[rule.endpoint])
            for status in statuses:
                if status < 300:
                    ok = operation["responses"]["200"]
                    operation["responses"][str(status)] = (
                        {"description": "no content"}
                        if status == 204
                        else {**ok, "description": "created, or the idempotent original (200)"}
                    )
                    continue
                if status == 304:
                    operation["responses"]["304"] = {
                        "description": "not modified: If-None-Match names the current version"
                    }
                    continue
                operation["responses"][str(status)] = {
                    "description": "see the error code",
                    "content": {"application/json": {"schema": "Error"}},
                }
            if path.startswith("/api/v1"):
                operation["security"] = [{"bearer": []}]
            spec.path(path=path, operations={method.lower(): operation})
    return spec.to_dict()


def _add_csv_bodies(
    spec: APISpec, marshmallow: MarshmallowPlugin, operation: dict, form, query
) -> None:
    """Document a CSV file sent as the text/csv body or in a multipart form."""
    name = form.__name__.removesuffix("Schema")
    if name not in spec.components.schemas:
        spec.components.schema(name, schema=form)
    content = operation["requestBody"]["content"]
    content["text/csv"] = {"schema": CSV_FILE}
    content["multipart/form-data"] = {
        "schema": {
            "allOf": [
                {"$ref": f"#/components/schemas/{name}"},
                {"type": "object", "required": ["file"], "properties": {"file": CSV_FILE}},
            ]
        }
    }
    for field_name, field in query().fields.items():
        # Query parameters cannot depend on the media type: they are optional here, and the
        # ones the form requires are required with a text/csv body.
        when = " (required then)" if field.required else ""
        operation["parameters"].append(
            {
                "in": "query",
                "name": field_name,
                "required": False,
                "description": f"with a text/csv body{when}",
                "schema": marshmallow.converter.field2property(field),
            }
        )


@bp.get("/api/v1/openapi.json")
def document():
    """The OpenAPI 3 document of this API."""
    return build_spec(current_app)
