"""Schedules: a user's manifest job, submitted on a cron expression."""

from __future__ import annotations

from flask import Blueprint

from app import auth, input_rules, schemas
from app.auth import current_principal
from app.runtime import get_runtime
from app.tracing import current_trace_id
from services import jobs, schedules

bp = Blueprint("schedules", __name__, url_prefix="/api/v1/schedules")
bp.before_request(auth.users_only)

# Built once: building a schema deep-copies every field it declares.
SCHEDULE_PUT = schemas.SchedulePutSchema()
SCHEDULE = schemas.ScheduleSchema()
SCHEDULE_LIST = schemas.ScheduleListSchema()
JOB = schemas.JobSchema()


@bp.put("/<schedule_name:name>")
def put_schedule(name: str):
    """Create the schedule of this name (201), or replace what it does (200)."""
    body = input_rules.load_json(SCHEDULE_PUT)
    spec = schedules.ScheduleSpec(
        name=name,
        cron=body["cron"],
        job=jobs.JobSpec.from_dict(body["job"]),
        paused=body["paused"],
        timezone=body["timezone"],
    )
    schedule, created = schedules.put_schedule(
        get_runtime(), current_principal(), spec, trace_id=current_trace_id()
    )
    return SCHEDULE.dump(schedule), 201 if created else 200


@bp.get("")
def list_schedules():
    """The caller's schedules (an operator's: everyone's), each with its next and last run."""
    return SCHEDULE_LIST.dump(
        {"schedules": schedules.list_schedules(get_runtime(), current_principal())}
    )


@bp.get("/<schedule_name:name>")
def get_schedule(name: str):
    """One of the caller's schedules."""
    return SCHEDULE.dump(schedules.get_schedule(get_runtime(), current_principal(), name))


@bp.post("/<schedule_name:name>/run")
def run_schedule(name: str):
    """Submit the schedule's job now (201; 200 replaying an Idempotency-Key); its times stay."""
    key = input_rules.check_header("Idempotency-Key", max_length=input_rules.IDEMPOTENCY_KEY_MAX)
    view = schedules.run_schedule_now(
        get_runtime(), current_principal(), name, trace_id=current_trace_id(), idempotency_key=key
    )
    return JOB.dump(view), 201 if view.created else 200


@bp.delete("/<schedule_name:name>")
def delete_schedule(name: str):
    """Delete one of the caller's schedules; the jobs it submitted stay."""
    schedules.delete_schedule(get_runtime(), current_principal(), name, trace_id=current_trace_id())
    return "", 204
