"""Request and response schemas; the same classes feed the OpenAPI document."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from marshmallow import (
    Schema,
    ValidationError,
    fields,
    missing,
    post_dump,
    validate,
    validates,
    validates_schema,
)

from app.input_rules import COLUMN_RANGES, Bool, Int, RequestSchema
from services import workloads as workload_rules
from services.csvjobs import WORKLOAD as CSV_WORKLOAD
from services.jobs import EVENT_TYPES
from services.runtime import MAX_RETRY_DELAY_SECONDS
from services.task_values import JsonValue


def whole_text(pattern: str, error: str) -> dict:
    r"""A string field's rule that `pattern` match the whole text: to its end in Python ("\Z":
    "$" lets a trailing newline through), and in the OpenAPI document as ECMA-262 says it, whose
    "$" is the end of the text and "\Z" a literal Z."""
    return {
        "validate": validate.Regexp(pattern + r"\Z", error=error),
        "metadata": {"pattern": pattern + "$"},
    }


# A schedule further off, ahead or behind, is more likely a mistake (a year typed wrong)
# than a plan.
MAX_SCHEDULE_DISTANCE = timedelta(days=366)

# The most results one page of GET /api/v1/jobs/{id}/results holds.
MAX_RESULT_PAGE = 10_000

# A day: longer than that, a task is better split, or checkpointed and retried.
MAX_TIMEOUT_SECONDS = 86400

HEX64 = whole_text(r"^[0-9a-f]{64}", "must be 64 lowercase hex digits")
# The secret a claim hands out per lease; every call under the lease carries it (sql/0026).
LEASE_TOKEN = whole_text(r"^cwl_[0-9a-f]{64}", "must be the lease_token the claim returned")
LEASE_TOKEN_HEADER = "Chunkwise-Lease-Token"
LEASE_TOKEN_ABOUT = {
    "description": "the secret lease_token the claim returned with this task (never in a URL)"
}


def _printable(value: str) -> None:
    # It names the worker in /api/v1/workers, log lines and metric labels, as the worker's
    # own --worker-id check requires.
    if not value.isprintable() or value.isspace():
        raise ValidationError("must be printable characters, not only spaces")


WORKER_ID = [validate.Length(min=1, max=200), _printable]
# One line, with a key of more than spaces.
LABEL_TEXT = whole_text(r"^(?=\s*[^=\s])[^=\r\n]{1,64}=[^\r\n]{0,256}", "must be key=value")


class LabelText(fields.Str):
    """A label as `key=value` text, loaded as a (key, value) pair; spaces around either go,
    so `team = a` is the label the JSON `{"team": "a"}` gives."""

    def __init__(self, **kwargs):
        super().__init__(**LABEL_TEXT, **kwargs)

    def deserialize(self, value, attr=None, data=None, **kwargs) -> tuple[str, str] | None:
        # After the field's own validation, which checks the text as it was sent.
        text = super().deserialize(value, attr, data, **kwargs)
        if text is None:
            return None
        key, value = text.split("=", 1)
        return key.strip(), value.strip()


class LabelPairs(fields.List):
    """Repeated `key=value` texts (a CSV job's query or form), loaded as a dict of labels."""

    def __init__(self, **kwargs):
        super().__init__(LabelText(), load_default=dict, **kwargs)

    def _deserialize(self, value, attr, data, **kwargs) -> dict[str, str]:
        pairs = super()._deserialize(value, attr, data, **kwargs)
        labels: dict[str, str] = {}
        twice: dict[int, list[str]] = {}
        for index, (key, text) in enumerate(pairs):
            if key in labels:
                # Named by its place in the list, as the rules of each item name theirs.
                twice[index] = [f"the key {key!r} is given twice"]
            labels.setdefault(key, text)
        if twice:
            raise ValidationError(twice)
        return labels


def _within_a_year(value: datetime) -> None:
    if abs(value - datetime.now(UTC)) > MAX_SCHEDULE_DISTANCE:
        raise ValidationError("must be within a year of now")


class Schedule(fields.AwareDateTime):
    """When a job may start (ISO 8601 with an offset): no task of it is claimed before."""

    def __init__(self, **kwargs):
        super().__init__(
            load_default=None,
            validate=_within_a_year,
            metadata={"description": "schedule the job: no task is claimed before this time"},
            **kwargs,
        )


LABELS = fields.Dict(
    keys=fields.Str(validate=validate.Length(min=1, max=64)),
    values=fields.Str(validate=validate.Length(max=256)),
)


# --- requests -----------------------------------------------------------------------------


# What the OpenAPI document says of a field holding JSON: OpenAPI 3.0 has no "any" type.
JSON_OBJECT_OR_ARRAY = {"oneOf": [{"type": "object"}, {"type": "array", "items": {}}]}
ANY_JSON = {
    "anyOf": [
        *JSON_OBJECT_OR_ARRAY["oneOf"],
        {"type": "string"},
        {"type": "number"},
        {"type": "boolean"},
    ],
    "nullable": True,
}


def _object_or_array(value: object) -> None:
    if not isinstance(value, dict | list):
        raise ValidationError("must be a JSON object or array")


class TaskSpecSchema(Schema):
    """One task of a manifest job (nested: JobCreateSchema has refused unstorable text): its
    input named by input_uri and input_sha256, or given as its JSON args."""

    chunk_index = Int(minimum=0, load_default=None)
    input_uri = fields.Str(load_default=None, validate=validate.Length(min=1, max=2000))
    input_sha256 = fields.Str(load_default=None, **HEX64)
    args = fields.Raw(
        validate=_object_or_array,
        metadata={
            **JSON_OBJECT_OR_ARRAY,
            "description": "the task's JSON arguments (an object or array), instead of "
            "input_uri and input_sha256: the coordinator stores them and derives both",
        },
    )
    parameters = fields.Dict(load_default=dict)

    @validates_schema
    def _one_input(self, data: dict, **kwargs) -> None:
        named = [n for n in ("input_uri", "input_sha256") if data.get(n) is not None]
        if "args" in data and named:
            raise ValidationError("give args, or input_uri and input_sha256, not both", "args")
        if "args" not in data and len(named) < 2:
            raise ValidationError(
                {
                    n: ["required (or give the task's args instead)"]
                    for n in ("input_uri", "input_sha256")
                    if n not in named
                }
            )


class JobCreateSchema(RequestSchema):
    """A manifest job: tasks for the caller's own workers."""

    workload = fields.Str(required=True, validate=validate.Length(min=1, max=100))
    input_uri = fields.Str(
        load_default=None,
        validate=validate.Length(min=1, max=2000),
        metadata={"description": "required unless every task gives its args"},
    )
    parameters = fields.Dict(load_default=dict)
    priority = Int(minimum=0, maximum=255, column="smallint", load_default=0)
    max_attempts = Int(minimum=1, maximum=20, load_default=None)
    labels = LABELS
    tasks = fields.List(
        fields.Nested(TaskSpecSchema), required=True, validate=validate.Length(min=1)
    )
    not_before = Schedule()
    timeout_seconds = Int(
        minimum=1,
        maximum=MAX_TIMEOUT_SECONDS,
        load_default=None,
        metadata={
            "description": "the longest one attempt at a task may run: past it no heartbeat "
            "renews the lease and no result is taken, and the task is retried as timed_out"
        },
    )
    depends_on = fields.List(
        fields.UUID(),
        load_default=list,
        metadata={
            "description": "jobs of the caller's that must succeed first: the tasks wait until "
            "the last does, and the job fails (dependency_failed) if one fails or is cancelled"
        },
    )

    @validates_schema
    def _job_input(self, data: dict, **kwargs) -> None:
        tasks = data.get("tasks") or []
        if data.get("input_uri") is None and not all("args" in t for t in tasks):
            raise ValidationError("required unless every task gives its args", "input_uri")


class SchedulePutSchema(RequestSchema):
    """A schedule (named by its path): a manifest job submitted on a cron expression."""

    cron = fields.Str(
        required=True,
        validate=validate.Length(min=1, max=200),
        metadata={
            "description": "five fields (minute hour day month weekday, on the clocks of "
            "timezone), "
            "or @hourly, @daily, @weekly, @monthly, @yearly",
            "example": "*/15 * * * *",
        },
    )
    job = fields.Nested(
        JobCreateSchema,
        required=True,
        metadata={"description": "what each run submits, as POST /api/v1/jobs takes it"},
    )
    timezone = fields.Str(
        load_default="UTC",
        validate=validate.Length(min=1, max=64),
        metadata={
            "description": "the IANA time zone the cron is read in",
            "example": "Europe/Paris",
        },
    )
    paused = Bool(load_default=False, metadata={"description": "no runs until false again"})


class ScheduleOwnerQuerySchema(RequestSchema):
    """Whose schedule the path names."""

    owner = fields.Str(
        validate=validate.Length(min=1, max=200),
        load_default=None,
        metadata={
            "description": "the schedule's owner, if not the caller: operators pause, resume, "
            "run and delete anyone's schedules; only its owner puts one"
        },
    )


class CsvJobFormSchema(RequestSchema):
    """The multipart form fields of a CSV statistics job (the file travels alongside)."""

    column = fields.Str(required=True, validate=validate.Length(min=1, max=1000))
    delimiter = fields.Str(load_default=",")
    chunks = Int(minimum=1, maximum=64, load_default=1)
    priority = Int(minimum=0, maximum=255, column="smallint", load_default=0)
    labels = LabelPairs(data_key="label")
    not_before = Schedule()


class JobFilterSchema(RequestSchema):
    """Which jobs: those with a label, of an owner, of a workload, or waiting for a job."""

    label = LabelText(load_default=None)
    # A user's name; only an operator sees anyone else's jobs.
    owner = fields.Str(validate=validate.Length(min=1, max=200), load_default=None)
    workload = fields.Str(validate=validate.Length(min=1, max=100), load_default=None)
    depends_on = fields.UUID(
        load_default=None, metadata={"description": "only the jobs that depend on this one"}
    )


class JobListQuerySchema(JobFilterSchema):
    """Query parameters of the job list."""

    status = fields.Str(
        validate=validate.OneOf(
            ["queued", "running", "merging", "succeeded", "failed", "cancelled"]
        ),
        load_default=None,
    )
    limit = Int(minimum=1, maximum=500, load_default=50)
    cursor = fields.Str(load_default=None)


class JobCancelSchema(JobFilterSchema):
    """Which unfinished jobs to cancel at once: at least one filter, and how many at most."""

    FILTERS = ("workload", "label", "owner", "depends_on", "status")

    status = fields.Str(
        validate=validate.OneOf(["queued", "running", "merging"]), load_default=None
    )
    limit = Int(minimum=1, maximum=1000, load_default=100)

    @validates_schema
    def _some_filter(self, data: dict, **kwargs) -> None:
        # Cancelling everything the caller has takes saying so: status is a filter too.
        if all(data.get(name) is None for name in self.FILTERS):
            raise ValidationError(
                f"give at least one of {', '.join(self.FILTERS)}", field_name="filter"
            )


class JobWaitQuerySchema(RequestSchema):
    """Query parameters of a job's view: how long to wait for a change to If-None-Match's."""

    wait_seconds = fields.Float(load_default=0, validate=validate.Range(min=0, max=30))


class ChunkPageQuerySchema(RequestSchema):
    """Query parameters of a page of a job's chunks, or of its results, in chunk order."""

    after = Int(
        minimum=-1,
        load_default=-1,
        metadata={"description": "the chunk_index the previous page ended at (-1: the first)"},
    )
    limit = Int(minimum=1, maximum=1000, load_default=1000)


class ResultPageQuerySchema(ChunkPageQuerySchema):
    """Query parameters of a page of a job's results, in chunk order."""

    limit = Int(
        minimum=1,
        maximum=MAX_RESULT_PAGE,
        load_default=1000,
        metadata={
            "description": "at most so many results; a page also ends with the result whose "
            "value and metrics take it past 8 MiB (never fewer than one)"
        },
    )


class EventQuerySchema(RequestSchema):
    """Query parameters of the event feed."""

    after = Int(
        minimum=0,
        column="bigint",
        load_default=0,
        metadata={"description": "the id of the last event read: the last page's next_after"},
    )
    limit = Int(minimum=1, maximum=1000, load_default=100)
    job_id = fields.UUID(load_default=None, metadata={"description": "only this job's events"})
    types = fields.List(
        fields.Str(validate=validate.OneOf(EVENT_TYPES)),
        data_key="type",
        load_default=None,
        validate=validate.Length(max=len(EVENT_TYPES)),
        metadata={"description": "only these events (repeat it for several); none: every one"},
    )


# A claim leases at most as many tasks as one batch of results can report.
MAX_BATCH_RESULTS = 1000


class ClaimSchema(RequestSchema):
    """A worker asking for work."""

    worker_id = fields.Str(required=True, validate=WORKER_ID)
    workloads = fields.List(fields.Str(), required=True, validate=validate.Length(min=1, max=20))
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


class Json(fields.Raw):
    """Any JSON value, loaded as a JsonValue so that null stays apart from absent."""

    def deserialize(self, value, attr=None, data=None, **kwargs):
        if value is None:
            return JsonValue(None)
        loaded = super().deserialize(value, attr, data, **kwargs)
        return loaded if loaded is missing else JsonValue(loaded)


class ResultFieldsSchema(Schema):
    """What a completed task reports: a manifest, a value for the coordinator to store, or
    for csv_stats the chunk summary."""

    result_uri = fields.Str(load_default=None, validate=validate.Length(min=1, max=2000))
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
        validate=validate.Length(min=1, max=20),
        metadata={
            "description": "with ?claim=N, and only then: the workloads the worker serves, as "
            "a claim names them"
        },
    )


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


# --- responses ----------------------------------------------------------------------------


# What the OpenAPI document says of a Method field, which apispec cannot infer.
NULLABLE_STRING = {"type": "string", "nullable": True}
NULLABLE_INTEGER = {"type": "integer", "nullable": True}
NULLABLE_OBJECT = {"type": "object", "nullable": True}
NULLABLE_DATETIME = {"type": "string", "format": "date-time", "nullable": True}


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


class ChunksByStateSchema(Schema):
    """How many chunks are in each state."""

    pending = fields.Int()
    leased = fields.Int()
    completed = fields.Int()
    failed = fields.Int()
    cancelled = fields.Int()


class JobSummarySchema(ResponseSchema):
    """A job as lists show it: its state without its payloads (dumped from services.jobs.JobView).

    No parameters, result or partial result, and the error only as its code and message:
    those are on the job's own view, GET /api/v1/jobs/{id}, so a page of jobs stays small
    however large each job's payloads are.
    """

    id = fields.UUID(attribute="job.id")
    workload = fields.Str(attribute="job.workload")
    owner = fields.Str()
    status = fields.Str(attribute="job.status")
    revision = fields.Int(attribute="job.revision")
    input_uri = fields.Str(attribute="job.input_uri")
    input_digest = fields.Method("_input_digest", metadata=NULLABLE_STRING)
    labels = fields.Dict(attribute="job.labels")
    priority = fields.Int(attribute="job.priority")
    # What a retry grants each unfinished task again; null for jobs from before sql/0012.
    max_attempts = fields.Int(attribute="job.max_attempts", allow_none=True)
    not_before = fields.DateTime(attribute="job.not_before", allow_none=True)
    timeout_seconds = fields.Int(attribute="job.timeout_seconds", allow_none=True)
    depends_on = fields.Method(
        "_depends_on", metadata={"type": "array", "items": {"type": "string", "format": "uuid"}}
    )
    chunks_total = fields.Int(attribute="job.chunks_total")
    chunks_completed = fields.Int(attribute="counts.completed")
    chunks_by_state = fields.Nested(ChunksByStateSchema, attribute="counts")
    progress = fields.Float()
    error = fields.Dict(attribute="job.error", allow_none=True)
    merge_seconds = fields.Float(attribute="job.merge_seconds", allow_none=True)
    created_at = fields.DateTime(attribute="job.created_at")
    started_at = fields.DateTime(attribute="job.started_at", allow_none=True)
    completed_at = fields.DateTime(attribute="job.completed_at", allow_none=True)
    # The trace of the request that created the job, which tracing.py then leaves alone.
    trace_id = fields.Str(attribute="job.trace_id")

    def _depends_on(self, view):
        return [str(job_id) for job_id in view.job.depends_on or ()]

    def _input_digest(self, view):
        return f"sha256:{view.job.input_sha256}" if view.job.input_sha256 else None


class JobSchema(JobSummarySchema):
    """A job's aggregate status (dumped from services.jobs.JobView), payloads and all."""

    parameters = fields.Dict(attribute="job.parameters")
    result = fields.Dict(attribute="job.result", allow_none=True)
    partial_result = fields.Method("_partial_result", metadata=NULLABLE_OBJECT)

    def _partial_result(self, view):
        # Never shown for a cancelled job, and only ever beside a failure, never as success.
        return view.job.partial_result if view.job.status == "failed" else None


class ScheduleSummarySchema(ResponseSchema):
    """A schedule as its list shows it: its runs, not the job it submits (which is on
    GET /api/v1/schedules/{name})."""

    name = fields.Str()
    owner = fields.Str()
    cron = fields.Str()
    timezone = fields.Str()
    paused = fields.Bool()
    next_run_at = fields.DateTime()
    last_run_at = fields.DateTime(allow_none=True)
    last_job_id = fields.UUID(allow_none=True)
    last_error = fields.Dict(
        allow_none=True,
        metadata={"description": "why the last run submitted no job ({code, message}), or null"},
    )
    created_at = fields.DateTime()
    updated_at = fields.DateTime()


class ScheduleSchema(ScheduleSummarySchema):
    """A schedule and its runs (dumped from repositories.schedules.Schedule)."""

    job = fields.Dict(metadata={"description": "what each run submits"})


class ScheduleListSchema(ResponseSchema):
    """The caller's schedules by name (an operator's: everyone's, by owner and name), each as
    its summary."""

    schedules = fields.List(fields.Nested(ScheduleSummarySchema))


class JobListSchema(ResponseSchema):
    """A page of jobs, each as its summary."""

    jobs = fields.List(fields.Nested(JobSummarySchema))
    next_cursor = fields.Str(allow_none=True)


class JobCancelResultSchema(ResponseSchema):
    """The jobs a filtered cancel cancelled (dumped from services.jobs.Cancelled)."""

    cancelled = fields.List(fields.UUID())
    count = fields.Int()
    more = fields.Bool(
        metadata={"description": "more matching unfinished jobs remain: send it again"}
    )


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
        return _retry_time(view.task)

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


def _retry_time(task) -> str | None:
    """The time before which a pending task (re-queued after a failure, or of a scheduled
    job) is not claimed; None unless the task is pending with such a time."""
    if task.status != "pending" or task.not_before is None or task.blocked:
        return None
    return task.not_before.isoformat()


def _csv_parameter(task, name: str) -> int | None:
    """A CSV chunk's record bound; a manifest task's parameters may use the name for anything."""
    return task.parameters.get(name) if task.workload == CSV_WORKLOAD else None


class ChunkListSchema(ResponseSchema):
    """A page of a job's chunks, each as its summary, and where the next page starts."""

    chunks = fields.List(fields.Nested(ChunkSummarySchema))
    next_after = fields.Int()


class ResultManifestSchema(Schema):
    """A completed task's result manifest, and its value when the coordinator stores it."""

    task_id = fields.UUID(attribute="id")
    chunk_index = fields.Int()
    attempt = fields.Int()
    result_uri = fields.Str()
    result_sha256 = fields.Str()
    metrics = fields.Dict(allow_none=True)
    completed_at = fields.DateTime()
    value = fields.Method(
        "_value",
        metadata={
            **ANY_JSON,
            "description": "the stored result value (any JSON, null included); absent when "
            "the task's result is stored elsewhere, at result_uri",
        },
    )

    def _value(self, result):
        return missing if result.value is None else json.loads(result.value)


class ResultListSchema(ResponseSchema):
    """A page of completed results in chunk order, and where the next page starts."""

    results = fields.List(fields.Nested(ResultManifestSchema))
    next_after = fields.Int(
        allow_none=True,
        metadata={
            "description": "the chunk_index to ask for the next page after; null when this "
            "page is the last (a page ended by its limit or its bytes may be followed by an "
            "empty one)"
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
        return _retry_time(task)


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


class ScheduleFiguresSchema(Schema):
    """Every user's schedules: how many, and whether their runs keep up."""

    active = fields.Int()
    paused = fields.Int()
    failing = fields.Int(metadata={"description": "schedules whose last run submitted no job"})
    lag_seconds = fields.Float(
        allow_none=True,
        metadata={"description": "how late the most overdue run is (null: none is due)"},
    )


class WorkloadPauseSchema(Schema):
    """A paused workload: who paused it, and when."""

    workload = fields.Str()
    paused_by = fields.Str()
    paused_at = fields.DateTime()


class QueueSchema(ResponseSchema):
    """The queue at a glance (dumped from services.queue.QueueView)."""

    chunks = fields.List(fields.Nested(StateCountSchema), attribute="figures.chunks")
    jobs_by_status = fields.Dict(attribute="figures.jobs_by_status")
    waiting = fields.Dict(
        attribute="figures.waiting_by_workload",
        metadata={"description": "pending chunks by workload waiting out a retry or a schedule"},
    )
    oldest_pending_seconds = fields.Float(
        attribute="figures.oldest_pending_seconds", allow_none=True
    )
    active_leases = fields.Int(attribute="figures.active_leases")
    oldest_lease_seconds = fields.Float(attribute="figures.oldest_lease_seconds", allow_none=True)
    max_leases_total = fields.Int(attribute="limits.max_leases_total")
    max_leases_per_worker = fields.Int(attribute="limits.max_leases_per_worker")
    max_queued_chunks = fields.Int(attribute="limits.max_queued_chunks")
    schedules = fields.Nested(ScheduleFiguresSchema, attribute="figures.schedules")
    paused_workloads = fields.List(
        fields.Nested(WorkloadPauseSchema),
        attribute="figures.paused",
        metadata={"description": "workloads whose tasks no claim leases until resumed"},
    )


class WorkloadSchema(ResponseSchema):
    """A served workload: its caps and pause (dumped from services.queue.WorkloadView)."""

    workload = fields.Str(attribute="name")
    paused = fields.Bool()
    paused_by = fields.Str(attribute="pause.paused_by", allow_none=True, dump_default=None)
    paused_at = fields.DateTime(attribute="pause.paused_at", allow_none=True, dump_default=None)
    max_leases_per_worker = fields.Int(
        attribute="caps.max_leases_per_worker",
        allow_none=True,
        metadata={"description": "null: a worker's capacity is its only bound"},
    )
    max_leases_total = fields.Int(
        attribute="caps.max_leases_total", allow_none=True, metadata={"description": "null: none"}
    )
    max_queued_tasks = fields.Int(attribute="caps.max_queued_tasks")
    max_tasks_per_job = fields.Int(attribute="caps.max_tasks_per_job")
    max_starts_per_second = fields.Float(
        attribute="caps.max_starts_per_second",
        allow_none=True,
        metadata={"description": "tasks its claims may start a second (null: no rate limit)"},
    )
    max_queued_tasks_per_user = fields.Int(
        attribute="caps.max_queued_tasks_per_user",
        allow_none=True,
        metadata={"description": "one user's unfinished tasks (null: max_queued_tasks)"},
    )
    max_stored_bytes_per_user = fields.Int(
        attribute="caps.max_stored_bytes_per_user",
        allow_none=True,
        metadata={"description": "bytes of parameters and labels one user's jobs may store"},
    )


WORKLOAD_NAME = whole_text("^" + workload_rules.NAME.pattern, f"must be {workload_rules.NAME_RULE}")


class WorkloadChangeSchema(RequestSchema):
    """The caps to change (PATCH /api/v1/workloads/{name}); those not given stay.

    Beyond these bounds a cap is more likely a typo than a plan; null, where allowed, means no
    cap of that kind.
    """

    max_leases_per_worker = Int(
        minimum=1,
        maximum=10_000,
        allow_none=True,
        metadata={"description": "leases one worker may hold (null: its capacity bounds it)"},
    )
    max_leases_total = Int(
        minimum=1,
        maximum=1_000_000,
        allow_none=True,
        metadata={"description": "leases all workers together may hold (null: no cap)"},
    )
    max_queued_tasks = Int(
        minimum=1, maximum=100_000_000, metadata={"description": "unfinished tasks it may hold"}
    )
    max_tasks_per_job = Int(
        minimum=1,
        maximum=1_000_000,
        metadata={"description": "tasks one job may have (at most max_queued_tasks)"},
    )
    max_starts_per_second = fields.Float(
        allow_none=True,
        validate=validate.Range(min=0, min_inclusive=False, max=100_000),
        metadata={"description": "tasks its claims may start a second (null: no rate limit)"},
    )
    max_queued_tasks_per_user = Int(
        minimum=1,
        maximum=100_000_000,
        allow_none=True,
        metadata={"description": "one user's unfinished tasks (null: max_queued_tasks)"},
    )
    max_stored_bytes_per_user = Int(
        minimum=1,
        maximum=2**40,
        column="bigint",
        allow_none=True,
        metadata={"description": "bytes of parameters and labels one user's jobs may store"},
    )


class WorkloadAddSchema(WorkloadChangeSchema):
    """A workload to serve (POST /api/v1/workloads); caps not given take the settings'."""

    name = fields.Str(required=True, **WORKLOAD_NAME)


class WorkloadListSchema(ResponseSchema):
    """Every workload this coordinator serves."""

    workloads = fields.List(fields.Nested(WorkloadSchema))


class WorkerSchema(Schema):
    """A worker as the coordinator has seen it (dumped from WorkerView)."""

    worker_id = fields.Str(attribute="worker.id")
    first_seen_at = fields.DateTime(attribute="worker.first_seen_at")
    last_seen_at = fields.DateTime(attribute="worker.last_seen_at")
    capacity = fields.Int(attribute="worker.capacity")
    workloads = fields.List(fields.Str(), attribute="worker.workloads")
    leases_held = fields.Int(attribute="worker.leases_held")
    lease_limit = fields.Int(
        metadata={
            "description": "the most leases it can hold: its capacity, within its workloads' "
            "per-worker caps"
        }
    )
    tasks_done = fields.Int(attribute="worker.tasks_done")
    peak_rss_bytes = fields.Int(attribute="worker.peak_rss_bytes", allow_none=True)


class WorkerListSchema(ResponseSchema):
    """Every known worker."""

    workers = fields.List(fields.Nested(WorkerSchema))


class CsvJobQuerySchema(CsvJobFormSchema):
    """The query parameters of a CSV statistics job whose body is the file (text/csv)."""
