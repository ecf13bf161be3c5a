"""Jobs: manifest and CSV submissions, filters, cancels, the job views and their results."""

from __future__ import annotations

import json

from marshmallow import Schema, ValidationError, fields, missing, validate, validates_schema

from app.input_rules import Int, RequestSchema
from app.schemas.base import ResponseSchema
from app.schemas.chunks import ChunkPageQuerySchema
from app.schemas.field_rules import (
    ANY_JSON,
    HEX64,
    JSON_OBJECT_OR_ARRAY,
    NULLABLE_OBJECT,
    NULLABLE_STRING,
    LabelPairs,
    LabelText,
    Schedule,
)

# The most results one page of GET /api/v1/jobs/{id}/results holds.
MAX_RESULT_PAGE = 10_000

# A day: longer than that, a task is better split, or checkpointed and retried.
MAX_TIMEOUT_SECONDS = 86400

LABELS = fields.Dict(
    keys=fields.Str(validate=validate.Length(min=1, max=64)),
    values=fields.Str(validate=validate.Length(max=256)),
)


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
    """Query parameters of a job's view: how long to wait for a change to If-None-Match's, or
    for the job to finish."""

    wait_seconds = fields.Float(load_default=0, validate=validate.Range(min=0, max=30))
    until = fields.Str(
        validate=validate.OneOf(["finished"]),
        load_default=None,
        metadata={
            "description": "finished: wait while the job is queued, running or merging, "
            "however it changes, and answer once it has succeeded, failed or been cancelled"
        },
    )


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


class CsvJobQuerySchema(CsvJobFormSchema):
    """The query parameters of a CSV statistics job whose body is the file (text/csv)."""
