"""Schedules: a cron-driven manifest job, put, listed and viewed by name."""

from __future__ import annotations

from marshmallow import fields, validate

from app.input_rules import Bool, RequestSchema
from app.schemas.base import ResponseSchema
from app.schemas.jobs import JobCreateSchema


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
