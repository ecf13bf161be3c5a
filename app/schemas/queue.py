"""The queue at a glance, the workloads served with their caps, and the workers seen."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from app.input_rules import Int, RequestSchema
from app.schemas.base import ResponseSchema
from app.schemas.field_rules import whole_text
from services import workloads as workload_rules


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
