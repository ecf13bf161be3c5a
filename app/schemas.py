"""Request and response schemas; the same classes feed the OpenAPI document."""

from __future__ import annotations

from flask import request
from marshmallow import Schema, fields, post_dump, validate
from werkzeug.exceptions import BadRequest

HEX64 = validate.Regexp(r"^[0-9a-f]{64}$", error="must be 64 lowercase hex digits")
WORKER_ID = validate.Length(min=1, max=200)
PRIORITY = validate.Range(min=0, max=255)
LABEL_FILTER = validate.Regexp(r"^[^=]{1,64}=.{0,256}$", error="must be key=value")
LABELS = fields.Dict(
    keys=fields.Str(validate=validate.Length(min=1, max=64)),
    values=fields.Str(validate=validate.Length(max=256)),
)


# --- requests -----------------------------------------------------------------------------


class TaskSpecSchema(Schema):
    """One task of a manifest job."""

    chunk_index = fields.Int(validate=validate.Range(min=0), load_default=None)
    input_uri = fields.Str(required=True, validate=validate.Length(min=1, max=2000))
    input_sha256 = fields.Str(required=True, validate=HEX64)
    parameters = fields.Dict(load_default=dict)


class JobCreateSchema(Schema):
    """A manifest job: tasks for the caller's own workers."""

    workload = fields.Str(required=True, validate=validate.Length(min=1, max=100))
    input_uri = fields.Str(required=True, validate=validate.Length(min=1, max=2000))
    parameters = fields.Dict(load_default=dict)
    priority = fields.Int(load_default=0, validate=PRIORITY)
    max_attempts = fields.Int(load_default=None, validate=validate.Range(min=1, max=20))
    labels = LABELS
    tasks = fields.List(
        fields.Nested(TaskSpecSchema), required=True, validate=validate.Length(min=1)
    )


class CsvJobFormSchema(Schema):
    """The multipart form fields of a CSV statistics job (the file travels alongside)."""

    column = fields.Str(required=True, validate=validate.Length(min=1, max=1000))
    delimiter = fields.Str(load_default=",")
    chunks = fields.Int(load_default=1, validate=validate.Range(min=1, max=64))
    priority = fields.Int(load_default=0, validate=PRIORITY)
    label = fields.List(fields.Str(validate=LABEL_FILTER), load_default=list)


class JobListQuerySchema(Schema):
    """Query parameters of the job list."""

    status = fields.Str(
        validate=validate.OneOf(
            ["queued", "running", "merging", "succeeded", "failed", "cancelled"]
        ),
        load_default=None,
    )
    limit = fields.Int(load_default=50, validate=validate.Range(min=1, max=500))
    cursor = fields.Str(load_default=None)
    label = fields.Str(validate=LABEL_FILTER, load_default=None)


class JobWaitQuerySchema(Schema):
    """Query parameters of a job's view: how long to wait for a change to If-None-Match's."""

    wait_seconds = fields.Float(load_default=0, validate=validate.Range(min=0, max=30))


class EventQuerySchema(Schema):
    """Query parameters of the event feed."""

    after = fields.Int(load_default=0, validate=validate.Range(min=0))
    limit = fields.Int(load_default=100, validate=validate.Range(min=1, max=1000))


class ClaimSchema(Schema):
    """A worker asking for work."""

    worker_id = fields.Str(required=True, validate=WORKER_ID)
    workloads = fields.List(fields.Str(), required=True, validate=validate.Length(min=1, max=20))
    capacity = fields.Int(load_default=1, validate=validate.Range(min=1, max=64))
    wait_seconds = fields.Float(load_default=0, validate=validate.Range(min=0, max=30))


class LeaseSchema(Schema):
    """Identifies the lease a call is made under."""

    worker_id = fields.Str(required=True, validate=WORKER_ID)
    attempt = fields.Int(required=True, validate=validate.Range(min=1))


class HeartbeatSchema(LeaseSchema):
    """A heartbeat, optionally carrying a checkpoint."""

    checkpoint = fields.Dict(load_default=None, allow_none=True)


class ResultSchema(LeaseSchema):
    """A completed task: a manifest, or for csv_stats the chunk summary."""

    result_uri = fields.Str(load_default=None, validate=validate.Length(min=1, max=2000))
    result_sha256 = fields.Str(load_default=None, validate=HEX64)
    summary = fields.Dict(load_default=None)
    metrics = fields.Dict(load_default=dict)


class FailureSchema(LeaseSchema):
    """A failed task."""

    error_code = fields.Str(required=True, validate=validate.Length(min=1, max=100))
    error_message = fields.Str(load_default="", validate=validate.Length(max=4000))
    retryable = fields.Bool(required=True)
    details = fields.Dict(load_default=dict)


# --- responses ----------------------------------------------------------------------------


class ErrorBodySchema(Schema):
    """The error object."""

    code = fields.Str()
    message = fields.Str()
    details = fields.Dict()


class ErrorSchema(Schema):
    """Every error response."""

    error = fields.Nested(ErrorBodySchema)
    trace_id = fields.Str()


class ChunksByStateSchema(Schema):
    """How many chunks are in each state."""

    pending = fields.Int()
    leased = fields.Int()
    completed = fields.Int()
    failed = fields.Int()
    cancelled = fields.Int()


class JobSchema(Schema):
    """A job's aggregate status (dumped from services.jobs.JobView)."""

    id = fields.UUID(attribute="job.id")
    workload = fields.Str(attribute="job.workload")
    status = fields.Str(attribute="job.status")
    revision = fields.Int(attribute="job.revision")
    input_uri = fields.Str(attribute="job.input_uri")
    input_digest = fields.Method("_input_digest")
    parameters = fields.Dict(attribute="job.parameters")
    labels = fields.Dict(attribute="job.labels")
    priority = fields.Int(attribute="job.priority")
    chunks_total = fields.Int(attribute="job.chunks_total")
    chunks_completed = fields.Int(attribute="counts.completed")
    chunks_by_state = fields.Nested(ChunksByStateSchema, attribute="counts")
    progress = fields.Float()
    result = fields.Dict(attribute="job.result", allow_none=True)
    partial_result = fields.Method("_partial_result")
    error = fields.Dict(attribute="job.error", allow_none=True)
    merge_seconds = fields.Float(attribute="job.merge_seconds", allow_none=True)
    created_at = fields.DateTime(attribute="job.created_at")
    started_at = fields.DateTime(attribute="job.started_at", allow_none=True)
    completed_at = fields.DateTime(attribute="job.completed_at", allow_none=True)
    trace_id = fields.Str(attribute="job.trace_id")

    def _input_digest(self, view):
        return f"sha256:{view.job.input_sha256}" if view.job.input_sha256 else None

    def _partial_result(self, view):
        # Never shown for a cancelled job, and only ever beside a failure, never as success.
        return view.job.partial_result if view.job.status == "failed" else None


class JobListSchema(Schema):
    """A page of jobs."""

    jobs = fields.List(fields.Nested(JobSchema))
    next_cursor = fields.Str(allow_none=True)


class AttemptSchema(Schema):
    """One attempt at a chunk."""

    attempt_id = fields.UUID(attribute="id")
    attempt = fields.Int()
    worker_id = fields.Str()
    state = fields.Method("_state")
    trace_id = fields.Str()
    started_at = fields.DateTime(attribute="leased_at")
    finished_at = fields.DateTime(allow_none=True)
    error = fields.Method("_error")

    def _state(self, attempt):
        return attempt.outcome or "running"

    def _error(self, attempt):
        if attempt.error_code is None:
            return None
        return {"code": attempt.error_code, "message": attempt.error_message}


class ChunkSchema(Schema):
    """A chunk of a job with its attempts (dumped from services.chunks.ChunkView)."""

    id = fields.UUID(attribute="task.id")
    index = fields.Int(attribute="task.chunk_index")
    record_start = fields.Method("_record_start")
    record_end = fields.Method("_record_end")
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
    error = fields.Method("_error")

    def _record_start(self, view):
        return view.task.parameters.get("record_start")

    def _record_end(self, view):
        return view.task.parameters.get("record_end")

    def _error(self, view):
        t = view.task
        if t.error_code is None or t.status == "completed":
            return None
        return {"code": t.error_code, "message": t.error_message, "details": t.error_details}


class ChunkListSchema(Schema):
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


class ResultListSchema(Schema):
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
    parameters = fields.Method("_parameters")
    checkpoint = fields.Dict(attribute="task.checkpoint", allow_none=True)
    lease_expires_at = fields.DateTime(attribute="task.lease_expires_at")
    heartbeat_seconds = fields.Int()  # filled in by ClaimResponseSchema

    def _parameters(self, claimed):
        params = dict(claimed.task.parameters)
        # The byte range is the coordinator's business: the input URI already serves it.
        params.pop("byte_start", None)
        params.pop("byte_end", None)
        return params


class ClaimResponseSchema(Schema):
    """The tasks a claim leased, each told how often to heartbeat."""

    tasks = fields.List(fields.Nested(ClaimedTaskSchema))
    heartbeat_seconds = fields.Int()

    @post_dump
    def _heartbeat_per_task(self, data: dict, **kwargs) -> dict:
        for task in data["tasks"]:
            task["heartbeat_seconds"] = data["heartbeat_seconds"]
        return data


class TaskSchema(Schema):
    """A task as workers see it after a result or failure."""

    task_id = fields.UUID(attribute="id")
    job_id = fields.UUID()
    chunk_index = fields.Int()
    status = fields.Str()
    attempt = fields.Int()
    result_uri = fields.Str(allow_none=True)
    result_sha256 = fields.Str(allow_none=True)
    error_code = fields.Str(allow_none=True)


class LeaseRenewedSchema(Schema):
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


class EventListSchema(Schema):
    """Events in order."""

    events = fields.List(fields.Nested(EventSchema))
    next_after = fields.Int()


class HealthSchema(Schema):
    """Liveness and readiness."""

    status = fields.Str()
    missing_migrations = fields.List(fields.Str())


class StateCountSchema(Schema):
    """Chunks of one workload in one state."""

    workload = fields.Str()
    state = fields.Str()
    count = fields.Int()


class QueueSchema(Schema):
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


class WorkerListSchema(Schema):
    """Every known worker."""

    workers = fields.List(fields.Nested(WorkerSchema))


def load_json(schema: Schema) -> dict:
    """Parse the request's JSON object with a schema (400 when it is not JSON at all)."""
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return schema.load(body)


class CsvJobQuerySchema(CsvJobFormSchema):
    """The query parameters of a CSV statistics job whose body is the file (text/csv)."""
