"""Schedules: a user's manifest job, submitted on a cron expression."""

from __future__ import annotations

from flask import Blueprint, request

from app import auth, input_rules
from app.auth import current_principal
from app.runtime import get_runtime
from app.schemas import jobs as job_schemas
from app.schemas import schedules as schedule_schemas
from app.tracing import current_trace_id
from services import jobs, schedules

bp = Blueprint("schedules", __name__, url_prefix="/api/v1/schedules")
bp.before_request(auth.users_only)

# Built once: building a schema deep-copies every field it declares.
SCHEDULE_PUT = schedule_schemas.SchedulePutSchema()
OWNER_QUERY = schedule_schemas.ScheduleOwnerQuerySchema()
SCHEDULE = schedule_schemas.ScheduleSchema()
SCHEDULE_LIST = schedule_schemas.ScheduleListSchema()
JOB = job_schemas.JobSchema()


@bp.put("/<schedule_name:name>")
def put_schedule(name: str):
    """Create the schedule of this name (201), or replace what it does (200)."""
    owner = _owner()
    body = input_rules.load_json(SCHEDULE_PUT)
    spec = schedules.ScheduleSpec(
        name=name,
        cron=body["cron"],
        job=jobs.JobSpec.from_dict(body["job"]),
        paused=body["paused"],
        timezone=body["timezone"],
    )
    schedule, created = schedules.put_schedule(
        get_runtime(), current_principal(), spec, trace_id=current_trace_id(), owner=owner
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
    """One schedule: the caller's, or (an operator's call) the owner's."""
    schedule = schedules.get_schedule(get_runtime(), current_principal(), name, owner=_owner())
    return SCHEDULE.dump(schedule)


@bp.post("/<schedule_name:name>/run")
def run_schedule(name: str):
    """Submit the schedule's job now (201; 200 replaying an Idempotency-Key); its times stay."""
    owner = _owner()
    key = input_rules.check_header("Idempotency-Key", max_length=input_rules.IDEMPOTENCY_KEY_MAX)
    view = schedules.run_schedule_now(
        get_runtime(),
        current_principal(),
        name,
        trace_id=current_trace_id(),
        idempotency_key=key,
        owner=owner,
    )
    return JOB.dump(view), 201 if view.created else 200


@bp.post("/<schedule_name:name>/pause")
def pause_schedule(name: str):
    """Pause a schedule: no runs until it is resumed."""
    return _set_paused(name, paused=True)


@bp.post("/<schedule_name:name>/resume")
def resume_schedule(name: str):
    """Resume a schedule from now: it runs next at its cron's next time (a running one's stays)."""
    return _set_paused(name, paused=False)


@bp.delete("/<schedule_name:name>")
def delete_schedule(name: str):
    """Delete a schedule; the jobs it submitted stay."""
    schedules.delete_schedule(
        get_runtime(), current_principal(), name, trace_id=current_trace_id(), owner=_owner()
    )
    return "", 204


def _set_paused(name: str, *, paused: bool):
    schedule = schedules.pause_schedule(
        get_runtime(),
        current_principal(),
        name,
        paused=paused,
        trace_id=current_trace_id(),
        owner=_owner(),
    )
    return SCHEDULE.dump(schedule)


def _owner() -> str | None:
    """The owner the query names, if any (the service says who may name another)."""
    return OWNER_QUERY.load(input_rules.single_values(request.args))["owner"]
