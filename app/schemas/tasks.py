"""The worker protocol's schemas: claims, heartbeats, results and failures under a lease."""

from __future__ import annotations

import re
import uuid

from marshmallow import (
    Schema,
    ValidationError,
    fields,
    post_dump,
    validate,
    validates,
    validates_schema,
)

from app.input_rules import COLUMN_RANGES, Bool, Int, RequestSchema, unstorable_text
from app.schemas.base import ErrorBodySchema, ResponseSchema
from app.schemas.field_rules import ANY_JSON, HEX64, NULLABLE_DATETIME, Json, whole_text
from services.csvjobs import WORKLOAD as CSV_WORKLOAD
from services.runtime import MAX_RETRY_DELAY_SECONDS

# The secret a claim hands out per lease; every call under the lease carries it (sql/0026).
LEASE_TOKEN = whole_text(r"^cwl_[0-9a-f]{64}", "must be the lease_token the claim returned")
LEASE_TOKEN_HEADER = "Chunkwise-Lease-Token"


# Bounds the schemas below and plain_result_batch share.
MAX_WORKER_ID_CHARS = 200
MAX_RESULT_URI_CHARS = 2000
MAX_WORKLOADS = 20


def printable_name(value: str) -> bool:
    """Whether a worker id may name the worker in /api/v1/workers, log lines and metric labels,
    as the worker's own --worker-id check requires."""
    return value.isprintable() and not value.isspace()


def _printable(value: str) -> None:
    if not printable_name(value):
        raise ValidationError("must be printable characters, not only spaces")


WORKER_ID = [validate.Length(min=1, max=MAX_WORKER_ID_CHARS), _printable]

# A claim leases at most as many tasks as one batch of results can report.
MAX_BATCH_RESULTS = 1000


class ClaimSchema(RequestSchema):
    """A worker asking for work."""

    worker_id = fields.Str(required=True, validate=WORKER_ID)
    workloads = fields.List(
        fields.Str(), required=True, validate=validate.Length(min=1, max=MAX_WORKLOADS)
    )
    capacity = Int(minimum=1, maximum=MAX_BATCH_RESULTS, load_default=1)
    wait_seconds = fields.Float(load_default=0, validate=validate.Range(min=0, max=30))


class LeaseSchema(RequestSchema):
    """Identifies the lease a call is made under (the input's query; its token is a header)."""

    worker_id = fields.Str(required=True, validate=WORKER_ID)
    attempt = Int(minimum=1, required=True)


class LeaseTokenHeaderSchema(Schema):
    """The lease token of a call without a body: the Chunkwise-Lease-Token header."""

    lease_token = fields.Str(required=True, data_key=LEASE_TOKEN_HEADER, **LEASE_TOKEN)


class LeaseBodySchema(LeaseSchema):
    """Identifies the lease a call is made under, with the token that proves it is held."""

    lease_token = fields.Str(required=True, **LEASE_TOKEN)


class HeartbeatSchema(LeaseBodySchema):
    """A heartbeat, optionally carrying a checkpoint."""

    checkpoint = fields.Dict(load_default=None, allow_none=True)


class HeartbeatItemSchema(Schema):
    """One heartbeat of a batch (nested: HeartbeatBatchSchema has refused unstorable text)."""

    task_id = fields.UUID(required=True)
    attempt = Int(minimum=1, required=True)
    lease_token = fields.Str(required=True, **LEASE_TOKEN)
    checkpoint = fields.Dict(load_default=None, allow_none=True)


class HeartbeatBatchSchema(RequestSchema):
    """Many of one worker's leases renewed in one transaction, each fenced on its own."""

    worker_id = fields.Str(required=True, validate=WORKER_ID)
    heartbeats = fields.List(
        fields.Nested(HeartbeatItemSchema),
        required=True,
        validate=validate.Length(min=1, max=MAX_BATCH_RESULTS),
    )

    @validates("heartbeats")
    def _one_per_task(self, value: list[dict], **kwargs) -> None:
        # Two checkpoints for one task in one call would leave which one is kept to chance.
        # An item already refused for its own fields may lack its task_id.
        ids = [item["task_id"] for item in value if "task_id" in item]
        if len(set(ids)) != len(ids):
            raise ValidationError("a batch may renew each task once")


class ResultFieldsSchema(Schema):
    """What a completed task reports: a manifest, a value for the coordinator to store, or
    for csv_stats the chunk summary."""

    result_uri = fields.Str(
        load_default=None, validate=validate.Length(min=1, max=MAX_RESULT_URI_CHARS)
    )
    result_sha256 = fields.Str(load_default=None, **HEX64)
    summary = fields.Dict(load_default=None)
    value = Json(
        metadata={
            **ANY_JSON,
            "description": "the result itself, any JSON: the coordinator stores it (up to "
            "max_result_bytes of canonical JSON) and derives result_uri and result_sha256",
        },
    )
    metrics = fields.Dict(load_default=dict)

    @validates_schema
    def _value_or_manifest(self, data: dict, **kwargs) -> None:
        given = [n for n in ("result_uri", "result_sha256", "summary") if data.get(n) is not None]
        if "value" in data and given:
            raise ValidationError(f"give value or {', '.join(given)}, not both", "value")

    @validates("metrics")
    def _peak_rss_is_a_byte_count(self, value: dict, **kwargs) -> None:
        # Free-form but for the one figure the coordinator keeps in a bigint column.
        peak = value.get("peak_rss_bytes")
        high = COLUMN_RANGES["bigint"][1]
        if peak is not None and (type(peak) is not int or not 0 <= peak <= high):
            raise ValidationError({"peak_rss_bytes": [f"must be a whole number, 0 to {high}"]})


class ResultSchema(LeaseBodySchema, ResultFieldsSchema):
    """A completed task under the caller's lease."""


class ResultItemSchema(ResultFieldsSchema):
    """One result of a batch (nested: ResultBatchSchema has refused unstorable text)."""

    task_id = fields.UUID(required=True)
    attempt = Int(minimum=1, required=True)
    lease_token = fields.Str(required=True, **LEASE_TOKEN)


class ResultBatchSchema(RequestSchema):
    """Many results from one worker, accepted in one transaction, each fenced on its own."""

    worker_id = fields.Str(required=True, validate=WORKER_ID)
    results = fields.List(
        fields.Nested(ResultItemSchema),
        required=True,
        validate=validate.Length(min=1, max=MAX_BATCH_RESULTS),
    )
    workloads = fields.List(
        fields.Str(),
        validate=validate.Length(min=1, max=MAX_WORKLOADS),
        metadata={
            "description": "with ?claim=N, and only then: the workloads the worker serves, as "
            "a claim names them"
        },
    )


# What a batch of plain manifests may hold, for plain_result_batch.
_BATCH_FIELDS = frozenset({"worker_id", "results", "workloads"})
_MANIFEST_FIELDS = frozenset(
    {"task_id", "attempt", "lease_token", "result_uri", "result_sha256", "metrics"}
)
_LEASE_TOKEN = re.compile(LEASE_TOKEN["validate"].regex.pattern)
_HEX64 = re.compile(HEX64["validate"].regex.pattern)
_ATTEMPTS = range(1, COLUMN_RANGES["integer"][1] + 1)
_PEAK_RSS = range(0, COLUMN_RANGES["bigint"][1] + 1)


def plain_result_batch(body: dict) -> dict | None:
    """ResultBatchSchema's load of a batch of plain manifests, done without marshmallow (for a
    batch of results, its load cost more than the statements); None for any other body, which
    the schema then loads, or refuses field by field.

    tests/unit/test_result_batch_load.py holds the two equal on every body it draws.
    """
    if not body.keys() <= _BATCH_FIELDS or unstorable_text(body):
        return None
    worker_id, items = body.get("worker_id"), body.get("results")
    if not (type(worker_id) is str and 1 <= len(worker_id) <= MAX_WORKER_ID_CHARS):
        return None
    if not printable_name(worker_id):
        return None
    if not (type(items) is list and 1 <= len(items) <= MAX_BATCH_RESULTS):
        return None
    loaded = {"worker_id": worker_id, "results": [_plain_manifest(item) for item in items]}
    if None in loaded["results"]:
        return None
    if "workloads" in body:
        workloads = body["workloads"]
        if not (type(workloads) is list and 1 <= len(workloads) <= MAX_WORKLOADS):
            return None
        if any(type(w) is not str for w in workloads):
            return None
        loaded["workloads"] = list(workloads)
    return loaded


def _plain_manifest(item: object) -> dict | None:
    if type(item) is not dict or not item.keys() <= _MANIFEST_FIELDS:
        return None
    task_id, attempt, token = item.get("task_id"), item.get("attempt"), item.get("lease_token")
    uri, sha, metrics = item.get("result_uri"), item.get("result_sha256"), item.get("metrics", {})
    if type(task_id) is not str or type(attempt) is not int or attempt not in _ATTEMPTS:
        return None
    if type(token) is not str or not _LEASE_TOKEN.match(token):
        return None
    if uri is not None and not (type(uri) is str and 1 <= len(uri) <= MAX_RESULT_URI_CHARS):
        return None
    if sha is not None and not (type(sha) is str and _HEX64.match(sha)):
        return None
    if type(metrics) is not dict:
        return None
    peak = metrics.get("peak_rss_bytes")
    if peak is not None and (type(peak) is not int or peak not in _PEAK_RSS):
        return None
    try:
        task_uuid = uuid.UUID(task_id)
    except ValueError:
        return None
    return {
        "task_id": task_uuid,
        "attempt": attempt,
        "lease_token": token,
        "result_uri": uri,
        "result_sha256": sha,
        "summary": None,
        "metrics": dict(metrics),
    }


class ResultBatchQuerySchema(RequestSchema):
    """The query of a batch of results: whether to claim more tasks in the same call."""

    claim = Int(
        minimum=1,
        maximum=MAX_BATCH_RESULTS,
        load_default=None,
        metadata={
            "description": "after the results are recorded, lease up to this many tasks as "
            "POST /api/v1/tasks/claim would with capacity N and wait_seconds 0 (the body "
            "names the workloads)"
        },
    )


class FailureSchema(LeaseBodySchema):
    """A failed task."""

    error_code = fields.Str(required=True, validate=validate.Length(min=1, max=100))
    error_message = fields.Str(load_default="", validate=validate.Length(max=4000))
    retryable = Bool(required=True)
    details = fields.Dict(load_default=dict)
    retry_after_seconds = fields.Float(
        load_default=None,
        validate=validate.Range(min=0, max=MAX_RETRY_DELAY_SECONDS),
        metadata={
            "description": "not before this many seconds (an upstream's Retry-After, say); "
            "without it the coordinator's backoff decides"
        },
    )


class ResultOutcomeSchema(Schema):
    """What became of one result of a batch: its status as the single endpoint would answer."""

    task_id = fields.UUID()
    outcome = fields.Str(metadata={"enum": ["accepted", "replayed", "rejected"]})
    status = fields.Int(metadata={"description": "the HTTP status of the single endpoint"})
    error = fields.Nested(ErrorBodySchema, allow_none=True)


class RenewalOutcomeSchema(Schema):
    """What became of one heartbeat of a batch: its status as the single endpoint would answer."""

    task_id = fields.UUID()
    outcome = fields.Str(metadata={"enum": ["renewed", "rejected"]})
    status = fields.Int(metadata={"description": "the HTTP status of the single endpoint"})
    lease_expires_at = fields.DateTime(allow_none=True)
    error = fields.Nested(ErrorBodySchema, allow_none=True)


class HeartbeatBatchResponseSchema(ResponseSchema):
    """One outcome per heartbeat, in the order they were sent."""

    results = fields.List(fields.Nested(RenewalOutcomeSchema))


class ResultBatchResponseSchema(ResponseSchema):
    """One outcome per result, in order; with ?claim=N, the tasks then leased, as a claim's."""

    results = fields.List(fields.Nested(ResultOutcomeSchema))
    tasks = fields.List(
        fields.Nested(lambda: ClaimedTaskSchema()),
        metadata={"description": "with ?claim=N: the tasks leased, none when none was free"},
    )
    heartbeat_seconds = fields.Int(metadata={"description": "with ?claim=N"})
    max_result_bytes = fields.Int(metadata={"description": "with ?claim=N"})
    claim_error = fields.Nested(
        ErrorBodySchema,
        allow_none=True,
        metadata={
            "description": "with ?claim=N: why no task was leased although the results were "
            "recorded (403 worker_id_taken); null when the claim ran"
        },
    )


class ClaimedTaskSchema(Schema):
    """A leased task as a worker receives it (dumped from ClaimedTask)."""

    task_id = fields.UUID(attribute="task.id")
    job_id = fields.UUID(attribute="task.job_id")
    chunk_index = fields.Int(attribute="task.chunk_index")
    attempt = fields.Int(attribute="task.attempt")
    attempt_id = fields.UUID()
    trace_id = fields.Str()
    lease_token = fields.Str(
        metadata={
            "description": "secret: every call under this lease carries it (the input's "
            "Chunkwise-Lease-Token header, the other calls' lease_token field)"
        }
    )
    workload = fields.Str(attribute="task.workload")
    input_uri = fields.Str(attribute="task.input_uri")
    input_sha256 = fields.Str(attribute="task.input_sha256")
    parameters = fields.Method("_parameters", metadata={"type": "object"})
    checkpoint = fields.Dict(attribute="task.checkpoint", allow_none=True)
    lease_expires_at = fields.DateTime(attribute="task.lease_expires_at")
    deadline = fields.DateTime(
        attribute="task.deadline",
        allow_none=True,
        metadata={"description": "when the job's timeout_seconds ends this attempt"},
    )
    args = fields.Str(
        attribute="task.args",
        allow_none=True,
        metadata={
            "description": "the task's args as their canonical JSON text: input_sha256 is the "
            "SHA-256 of its UTF-8 bytes (parse it after checking); null for a task whose "
            "input is at input_uri"
        },
    )
    heartbeat_seconds = fields.Int()  # filled in by ClaimResponseSchema
    max_result_bytes = fields.Int(
        metadata={"description": "the most canonical JSON a result's value may be"}
    )  # filled in by ClaimResponseSchema

    def _parameters(self, claimed):
        params = dict(claimed.task.parameters)
        if claimed.task.workload == CSV_WORKLOAD:
            # A chunk's byte range is the coordinator's business: its input URI serves it.
            # A manifest task's parameters are its owner's, and reach the worker whole.
            params.pop("byte_start", None)
            params.pop("byte_end", None)
        return params


class ClaimResponseSchema(ResponseSchema):
    """The tasks a claim leased, each told how often to heartbeat."""

    tasks = fields.List(fields.Nested(ClaimedTaskSchema))
    heartbeat_seconds = fields.Int()
    max_result_bytes = fields.Int()

    @post_dump
    def _heartbeat_per_task(self, data: dict, **kwargs) -> dict:
        for task in data["tasks"]:
            task["heartbeat_seconds"] = data["heartbeat_seconds"]
            task["max_result_bytes"] = data["max_result_bytes"]
        return data


class TaskSchema(ResponseSchema):
    """A task as workers see it after a result or failure."""

    task_id = fields.UUID(attribute="id")
    job_id = fields.UUID()
    chunk_index = fields.Int()
    status = fields.Str()
    attempt = fields.Int()
    result_uri = fields.Str(allow_none=True)
    result_sha256 = fields.Str(allow_none=True)
    error_code = fields.Str(allow_none=True)
    not_before = fields.Method("_not_before", metadata=NULLABLE_DATETIME)

    def _not_before(self, task):
        return retry_time(task)


def retry_time(task) -> str | None:
    """The time before which a pending task (re-queued after a failure, or of a scheduled
    job) is not claimed; None unless the task is pending with such a time."""
    if task.status != "pending" or task.not_before is None or task.blocked:
        return None
    return task.not_before.isoformat()


class LeaseRenewedSchema(ResponseSchema):
    """A renewed lease."""

    lease_expires_at = fields.DateTime()
