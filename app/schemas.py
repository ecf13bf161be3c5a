"""Request and response schemas; the same classes feed the OpenAPI document."""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate

from flask import request
from marshmallow import Schema, ValidationError, fields, post_dump, pre_load, validate, validates
from werkzeug.datastructures import MultiDict
from werkzeug.exceptions import BadRequest, RequestEntityTooLarge, UnsupportedMediaType

from services.csvjobs import WORKLOAD as CSV_WORKLOAD

# --- the input rules every request shares -------------------------------------------------

# Room for a batch of MAX_BATCH_RESULTS results with their summaries, several times over.
MAX_JSON_BYTES = 4 * 1024 * 1024
MAX_JSON_DEPTH = 32
# The PostgreSQL column types (sql/0001.queue.sql) an integer field may be stored in.
COLUMN_RANGES = {
    "smallint": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
}
# json.loads pairs \ud83d\ude00 into one code point, so any surrogate left is unpaired; text
# columns refuse NUL, and UTF-8 cannot encode a lone surrogate.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# A JSON string, or an unterminated one running to the end: every quote starts a match that
# succeeds, so scanning stays linear (a pattern that could fail would rescan from each quote).
_JSON_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+\\?(?:"|\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def text_problem(value: str) -> str | None:
    """Why PostgreSQL could not store this string, or None when it can."""
    found = _UNSTORABLE.search(value)
    if found is None:
        return None
    if found.group() == "\x00":
        return "must not contain NUL (\\u0000)"
    return "must not contain an unpaired surrogate"


def unstorable_text(value: object) -> dict | list | None:
    """Marshmallow-shaped errors for each string, key or value, PostgreSQL could not store."""
    if isinstance(value, str):
        problem = text_problem(value)
        return [problem] if problem else None
    if isinstance(value, dict):
        errors: dict = {}
        for key, item in value.items():
            if isinstance(key, str) and (problem := text_problem(key)):
                # Named as JSON spells it: the raw key would carry the bad character back.
                errors[json.dumps(key)[1:-1]] = [f"a key {problem}"]
            elif (found := unstorable_text(item)) is not None:
                errors[key] = found
        return errors or None
    if isinstance(value, list | tuple):
        errors = {i: found for i, item in enumerate(value) if (found := unstorable_text(item))}
        return errors or None
    return None


class RequestSchema(Schema):
    """Base of every request schema: nothing PostgreSQL cannot store, at any depth."""

    @pre_load
    def _refuse_unstorable_text(self, data: object, **kwargs) -> object:
        # One walk over the raw input covers named fields, unknown ones and free-form JSON
        # (parameters, labels, details, checkpoint) alike, from bodies, forms and queries.
        errors = unstorable_text(data)
        if errors:
            raise ValidationError(errors)
        return data


class Int(fields.Integer):
    """An integer that fits its PostgreSQL column (integer unless told), within any bounds."""

    def __init__(
        self,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
        column: str = "integer",
        **kwargs,
    ):
        low, high = COLUMN_RANGES[column]
        low = low if minimum is None else max(low, minimum)
        high = high if maximum is None else min(high, maximum)
        super().__init__(validate=validate.Range(min=low, max=high), **kwargs)

    def _deserialize(self, value, attr, data, **kwargs):
        # 1.5 must not quietly become 1. Text stays accepted: queries and forms carry "7".
        if isinstance(value, float) and not value.is_integer():
            raise self.make_error("invalid")
        return super()._deserialize(value, attr, data, **kwargs)


class Bool(fields.Boolean):
    """true or false, and nothing else a JSON body could hold ("yes", 1, "false")."""

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, bool):
            raise self.make_error("invalid")
        return value


def check_header(name: str, max_length: int | None = None) -> str | None:
    """A request header's value, refused with 422 when it could not be stored."""
    return checked_text(name, request.headers.get(name), max_length)


def checked_text(name: str, value: str | None, max_length: int | None = None) -> str | None:
    """A header's or form field's value, refused with 422 naming it when it could not be stored."""
    if value is None:
        return None
    problem = text_problem(value)
    if problem is None and max_length is not None and not 1 <= len(value) <= max_length:
        problem = f"must be 1 to {max_length} characters"
    if problem:
        raise ValidationError({name: [problem]})
    return value


IDEMPOTENCY_KEY_MAX = 200
HEX64 = validate.Regexp(r"^[0-9a-f]{64}$", error="must be 64 lowercase hex digits")


def _printable(value: str) -> None:
    # It names the worker in /api/v1/workers, log lines and metric labels, as the worker's
    # own --worker-id check requires.
    if not value.isprintable() or value.isspace():
        raise ValidationError("must be printable characters, not only spaces")


WORKER_ID = [validate.Length(min=1, max=200), _printable]
# One line, so "\Z" rather than "$", which lets a trailing newline through.
LABEL_FILTER = validate.Regexp(r"^[^=\r\n]{1,64}=[^\r\n]{0,256}\Z", error="must be key=value")
LABELS = fields.Dict(
    keys=fields.Str(validate=validate.Length(min=1, max=64)),
    values=fields.Str(validate=validate.Length(max=256)),
)


# --- requests -----------------------------------------------------------------------------


class TaskSpecSchema(Schema):
    """One task of a manifest job (nested: JobCreateSchema has refused unstorable text)."""

    chunk_index = Int(minimum=0, load_default=None)
    input_uri = fields.Str(required=True, validate=validate.Length(min=1, max=2000))
    input_sha256 = fields.Str(required=True, validate=HEX64)
    parameters = fields.Dict(load_default=dict)


class JobCreateSchema(RequestSchema):
    """A manifest job: tasks for the caller's own workers."""

    workload = fields.Str(required=True, validate=validate.Length(min=1, max=100))
    input_uri = fields.Str(required=True, validate=validate.Length(min=1, max=2000))
    parameters = fields.Dict(load_default=dict)
    priority = Int(minimum=0, maximum=255, column="smallint", load_default=0)
    max_attempts = Int(minimum=1, maximum=20, load_default=None)
    labels = LABELS
    tasks = fields.List(
        fields.Nested(TaskSpecSchema), required=True, validate=validate.Length(min=1)
    )


class CsvJobFormSchema(RequestSchema):
    """The multipart form fields of a CSV statistics job (the file travels alongside)."""

    column = fields.Str(required=True, validate=validate.Length(min=1, max=1000))
    delimiter = fields.Str(load_default=",")
    chunks = Int(minimum=1, maximum=64, load_default=1)
    priority = Int(minimum=0, maximum=255, column="smallint", load_default=0)
    label = fields.List(fields.Str(validate=LABEL_FILTER), load_default=list)


class JobListQuerySchema(RequestSchema):
    """Query parameters of the job list."""

    status = fields.Str(
        validate=validate.OneOf(
            ["queued", "running", "merging", "succeeded", "failed", "cancelled"]
        ),
        load_default=None,
    )
    limit = Int(minimum=1, maximum=500, load_default=50)
    cursor = fields.Str(load_default=None)
    label = fields.Str(validate=LABEL_FILTER, load_default=None)


class JobWaitQuerySchema(RequestSchema):
    """Query parameters of a job's view: how long to wait for a change to If-None-Match's."""

    wait_seconds = fields.Float(load_default=0, validate=validate.Range(min=0, max=30))


class EventQuerySchema(RequestSchema):
    """Query parameters of the event feed."""

    after = Int(minimum=0, column="bigint", load_default=0)
    limit = Int(minimum=1, maximum=1000, load_default=100)


# A claim leases at most as many tasks as one batch of results can report.
MAX_BATCH_RESULTS = 1000


class ClaimSchema(RequestSchema):
    """A worker asking for work."""

    worker_id = fields.Str(required=True, validate=WORKER_ID)
    workloads = fields.List(fields.Str(), required=True, validate=validate.Length(min=1, max=20))
    capacity = Int(minimum=1, maximum=MAX_BATCH_RESULTS, load_default=1)
    wait_seconds = fields.Float(load_default=0, validate=validate.Range(min=0, max=30))


class LeaseSchema(RequestSchema):
    """Identifies the lease a call is made under."""

    worker_id = fields.Str(required=True, validate=WORKER_ID)
    attempt = Int(minimum=1, required=True)


class HeartbeatSchema(LeaseSchema):
    """A heartbeat, optionally carrying a checkpoint."""

    checkpoint = fields.Dict(load_default=None, allow_none=True)


class HeartbeatItemSchema(Schema):
    """One heartbeat of a batch (nested: HeartbeatBatchSchema has refused unstorable text)."""

    task_id = fields.UUID(required=True)
    attempt = Int(minimum=1, required=True)
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
    """What a completed task reports: a manifest, or for csv_stats the chunk summary."""

    result_uri = fields.Str(load_default=None, validate=validate.Length(min=1, max=2000))
    result_sha256 = fields.Str(load_default=None, validate=HEX64)
    summary = fields.Dict(load_default=None)
    metrics = fields.Dict(load_default=dict)

    @validates("metrics")
    def _peak_rss_is_a_byte_count(self, value: dict, **kwargs) -> None:
        # Free-form but for the one figure the coordinator keeps in a bigint column.
        peak = value.get("peak_rss_bytes")
        high = COLUMN_RANGES["bigint"][1]
        if peak is not None and (type(peak) is not int or not 0 <= peak <= high):
            raise ValidationError({"peak_rss_bytes": [f"must be a whole number, 0 to {high}"]})


class ResultSchema(LeaseSchema, ResultFieldsSchema):
    """A completed task under the caller's lease."""


class ResultItemSchema(ResultFieldsSchema):
    """One result of a batch (nested: ResultBatchSchema has refused unstorable text)."""

    task_id = fields.UUID(required=True)
    attempt = Int(minimum=1, required=True)


class ResultBatchSchema(RequestSchema):
    """Many results from one worker, accepted in one transaction, each fenced on its own."""

    worker_id = fields.Str(required=True, validate=WORKER_ID)
    results = fields.List(
        fields.Nested(ResultItemSchema),
        required=True,
        validate=validate.Length(min=1, max=MAX_BATCH_RESULTS),
    )


class FailureSchema(LeaseSchema):
    """A failed task."""

    error_code = fields.Str(required=True, validate=validate.Length(min=1, max=100))
    error_message = fields.Str(load_default="", validate=validate.Length(max=4000))
    retryable = Bool(required=True)
    details = fields.Dict(load_default=dict)


# --- responses ----------------------------------------------------------------------------


# What the OpenAPI document says of a Method field, which apispec cannot infer.
NULLABLE_STRING = {"type": "string", "nullable": True}
NULLABLE_INTEGER = {"type": "integer", "nullable": True}
NULLABLE_OBJECT = {"type": "object", "nullable": True}


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
    """One outcome per result, in the order they were sent."""

    results = fields.List(fields.Nested(ResultOutcomeSchema))


class ChunksByStateSchema(Schema):
    """How many chunks are in each state."""

    pending = fields.Int()
    leased = fields.Int()
    completed = fields.Int()
    failed = fields.Int()
    cancelled = fields.Int()


class JobSchema(ResponseSchema):
    """A job's aggregate status (dumped from services.jobs.JobView)."""

    id = fields.UUID(attribute="job.id")
    workload = fields.Str(attribute="job.workload")
    status = fields.Str(attribute="job.status")
    revision = fields.Int(attribute="job.revision")
    input_uri = fields.Str(attribute="job.input_uri")
    input_digest = fields.Method("_input_digest", metadata=NULLABLE_STRING)
    parameters = fields.Dict(attribute="job.parameters")
    labels = fields.Dict(attribute="job.labels")
    priority = fields.Int(attribute="job.priority")
    # What a retry grants each unfinished task again; null for jobs from before sql/0012.
    max_attempts = fields.Int(attribute="job.max_attempts", allow_none=True)
    chunks_total = fields.Int(attribute="job.chunks_total")
    chunks_completed = fields.Int(attribute="counts.completed")
    chunks_by_state = fields.Nested(ChunksByStateSchema, attribute="counts")
    progress = fields.Float()
    result = fields.Dict(attribute="job.result", allow_none=True)
    partial_result = fields.Method("_partial_result", metadata=NULLABLE_OBJECT)
    error = fields.Dict(attribute="job.error", allow_none=True)
    merge_seconds = fields.Float(attribute="job.merge_seconds", allow_none=True)
    created_at = fields.DateTime(attribute="job.created_at")
    started_at = fields.DateTime(attribute="job.started_at", allow_none=True)
    completed_at = fields.DateTime(attribute="job.completed_at", allow_none=True)
    # The trace of the request that created the job, which tracing.py then leaves alone.
    trace_id = fields.Str(attribute="job.trace_id")

    def _input_digest(self, view):
        return f"sha256:{view.job.input_sha256}" if view.job.input_sha256 else None

    def _partial_result(self, view):
        # Never shown for a cancelled job, and only ever beside a failure, never as success.
        return view.job.partial_result if view.job.status == "failed" else None


class JobListSchema(ResponseSchema):
    """A page of jobs."""

    jobs = fields.List(fields.Nested(JobSchema))
    next_cursor = fields.Str(allow_none=True)


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


class ChunkSchema(ResponseSchema):
    """A chunk of a job with its attempts (dumped from services.chunks.ChunkView)."""

    id = fields.UUID(attribute="task.id")
    index = fields.Int(attribute="task.chunk_index")
    record_start = fields.Method("_record_start", metadata=NULLABLE_INTEGER)
    record_end = fields.Method("_record_end", metadata=NULLABLE_INTEGER)
    state = fields.Str(attribute="task.status")
    attempt = fields.Int(attribute="task.attempt")
    max_attempts = fields.Int(attribute="task.max_attempts")
    lease_owner = fields.Str(attribute="task.lease_owner", allow_none=True)
    lease_expires_at = fields.DateTime(attribute="task.lease_expires_at", allow_none=True)
    input_sha256 = fields.Str(attribute="task.input_sha256")
    result_uri = fields.Str(attribute="task.result_uri", allow_none=True)
    result_sha256 = fields.Str(attribute="task.result_sha256", allow_none=True)
    metrics = fields.Dict(attribute="task.metrics", allow_none=True)
    checkpoint = fields.Dict(attribute="task.checkpoint", allow_none=True)
    summary = fields.Dict(allow_none=True)
    attempts = fields.List(fields.Nested(AttemptSchema))
    error = fields.Method("_error", metadata=NULLABLE_OBJECT)

    def _record_start(self, view):
        return _csv_parameter(view.task, "record_start")

    def _record_end(self, view):
        return _csv_parameter(view.task, "record_end")

    def _error(self, view):
        t = view.task
        if t.error_code is None or t.status == "completed":
            return None
        return {"code": t.error_code, "message": t.error_message, "details": t.error_details}


def _csv_parameter(task, name: str) -> int | None:
    """A CSV chunk's record bound; a manifest task's parameters may use the name for anything."""
    return task.parameters.get(name) if task.workload == CSV_WORKLOAD else None


class ChunkListSchema(ResponseSchema):
    """A job's chunks."""

    chunks = fields.List(fields.Nested(ChunkSchema))


class ResultManifestSchema(Schema):
    """A completed task's result manifest."""

    task_id = fields.UUID(attribute="id")
    chunk_index = fields.Int()
    attempt = fields.Int()
    result_uri = fields.Str()
    result_sha256 = fields.Str()
    metrics = fields.Dict(allow_none=True)
    completed_at = fields.DateTime()


class ResultListSchema(ResponseSchema):
    """Completed result manifests in chunk order."""

    results = fields.List(fields.Nested(ResultManifestSchema))


class ClaimedTaskSchema(Schema):
    """A leased task as a worker receives it (dumped from ClaimedTask)."""

    task_id = fields.UUID(attribute="task.id")
    job_id = fields.UUID(attribute="task.job_id")
    chunk_index = fields.Int(attribute="task.chunk_index")
    attempt = fields.Int(attribute="task.attempt")
    attempt_id = fields.UUID()
    trace_id = fields.Str()
    workload = fields.Str(attribute="task.workload")
    input_uri = fields.Str(attribute="task.input_uri")
    input_sha256 = fields.Str(attribute="task.input_sha256")
    parameters = fields.Method("_parameters", metadata={"type": "object"})
    checkpoint = fields.Dict(attribute="task.checkpoint", allow_none=True)
    lease_expires_at = fields.DateTime(attribute="task.lease_expires_at")
    heartbeat_seconds = fields.Int()  # filled in by ClaimResponseSchema

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

    @post_dump
    def _heartbeat_per_task(self, data: dict, **kwargs) -> dict:
        for task in data["tasks"]:
            task["heartbeat_seconds"] = data["heartbeat_seconds"]
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


class LeaseRenewedSchema(ResponseSchema):
    """A renewed lease."""

    lease_expires_at = fields.DateTime()


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


class HealthSchema(ResponseSchema):
    """Liveness and readiness."""

    status = fields.Str()
    missing_migrations = fields.List(fields.Str())


class StateCountSchema(Schema):
    """Chunks of one workload in one state."""

    workload = fields.Str()
    state = fields.Str()
    count = fields.Int()


class QueueSchema(ResponseSchema):
    """The queue at a glance (dumped from services.queue.QueueView)."""

    chunks = fields.List(fields.Nested(StateCountSchema), attribute="figures.chunks")
    jobs_by_status = fields.Dict(attribute="figures.jobs_by_status")
    oldest_pending_seconds = fields.Float(
        attribute="figures.oldest_pending_seconds", allow_none=True
    )
    active_leases = fields.Int(attribute="figures.active_leases")
    oldest_lease_seconds = fields.Float(attribute="figures.oldest_lease_seconds", allow_none=True)
    max_leases_total = fields.Int(attribute="limits.max_leases_total")
    max_leases_per_worker = fields.Int(attribute="limits.max_leases_per_worker")
    max_queued_chunks = fields.Int(attribute="limits.max_queued_chunks")


class WorkerSchema(Schema):
    """A worker as the coordinator has seen it."""

    worker_id = fields.Str(attribute="id")
    first_seen_at = fields.DateTime()
    last_seen_at = fields.DateTime()
    capacity = fields.Int()
    workloads = fields.List(fields.Str())
    leases_held = fields.Int()
    tasks_done = fields.Int()
    peak_rss_bytes = fields.Int(allow_none=True)


class WorkerListSchema(ResponseSchema):
    """Every known worker."""

    workers = fields.List(fields.Nested(WorkerSchema))


GIVEN_TWICE = "give this parameter once"


def single_values(values: MultiDict, lists: tuple[str, ...] = ()) -> dict:
    """A query's or form's fields as a dict, each of `lists` as a list; any other field given
    more than once is refused, since which of its values counts would be a guess."""
    repeated = {
        name: [GIVEN_TWICE]
        for name in values
        if name not in lists and len(values.getlist(name)) > 1
    }
    if repeated:
        raise ValidationError(repeated)
    return {**values.to_dict(), **{name: values.getlist(name) for name in lists}}


def load_json(schema: Schema) -> dict:
    """Parse the request's JSON object with a schema (400 when it is not JSON within limits)."""
    body = decode_json_body()
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return schema.load(body)


def decode_json_body() -> object:
    """The request's JSON value: UTF-8, at most MAX_JSON_BYTES and MAX_JSON_DEPTH deep."""
    if not request.is_json:
        raise UnsupportedMediaType("the request body must be JSON (Content-Type: application/json)")
    try:
        text = _read_body(MAX_JSON_BYTES).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest("the request body must be UTF-8") from exc
    # Measured before decoding: json.loads recurses once per level, so a deep body would
    # otherwise end in RecursionError rather than a clear refusal.
    # Counting brackets first spares the scan to the bodies that could nest that deep at all.
    opened = text.count("[") + text.count("{")
    if opened > MAX_JSON_DEPTH and json_depth(text) > MAX_JSON_DEPTH:
        raise BadRequest(f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except ValueError as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from exc


def json_depth(text: str) -> int:
    """How deeply arrays and objects nest in a JSON text (brackets inside strings ignored)."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)


def _read_body(limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise RequestEntityTooLarge(f"a JSON body may be at most {limit} bytes")
    # A chunked body states no length: read one byte past the limit to know it is over.
    blocks, size = [], 0
    while size <= limit:
        block = request.stream.read(limit + 1 - size)
        if not block:
            break
        blocks.append(block)
        size += len(block)
    if size > limit:
        raise RequestEntityTooLarge(f"a JSON body may be at most {limit} bytes")
    return b"".join(blocks)


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large for a JSON number here")
    return value


class CsvJobQuerySchema(CsvJobFormSchema):
    """The query parameters of a CSV statistics job whose body is the file (text/csv)."""
