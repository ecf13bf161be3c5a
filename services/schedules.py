"""Schedules: a manifest job submitted on a cron expression, by the maintenance pass."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from psycopg import Connection

from repositories import events as event_rows
from repositories import locks
from repositories import schedules as schedule_rows
from repositories import users as user_rows
from repositories.clock import database_now
from repositories.schedules import DueSchedule, Schedule, ScheduleSummary
from services import jobs
from services.auth import Principal
from services.errors import Conflict, Forbidden, InvalidInput, NotFound, QueueFull
from services.runtime import Runtime

logger = logging.getLogger(__name__)

# A name fits a path segment, a label's value and a log line as it is (app/path_ids.py).
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
NAME_RULE = "1 to 100 letters, digits, '.', '_' or '-', the first a letter or a digit"
# The label every run's job carries, naming its schedule: GET /api/v1/jobs?label=schedule=NAME.
SCHEDULE_LABEL = "schedule"
# How many runs one maintenance pass submits; the rest wait for the next pass.
RUNS_PER_PASS = 100
# Cron's shorthands for the common five-field schedules (not @reboot: there is no boot).
SHORTHANDS = {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}


@dataclass(frozen=True)
class ScheduleSpec:
    """A schedule as its owner describes it."""

    name: str
    cron: str
    job: jobs.JobSpec
    paused: bool = False
    timezone: str = "UTC"


def next_run_after(
    cron: str, moment: datetime, timezone: str = "UTC", *, previous: datetime | None = None
) -> datetime:
    """The first time after `moment` that the five-field cron expression names, read on the
    clocks of `timezone` (an IANA name), in UTC.

    Where a zone's clocks go back, an hour's wall-clock times come twice: a run never repeats
    the wall-clock time of the `previous` run, so a daily 02:30 runs once that night, while a
    run every 30 minutes keeps its pace. Where clocks go forward past a time, it runs at the
    first time after the gap.
    """
    if len(cron.split()) != 5 and cron.strip() not in SHORTHANDS:
        raise InvalidInput.field(
            "cron", "must be five fields (minute hour day month weekday) or @hourly, @daily, ..."
        )
    zone = _zone(timezone)
    try:
        times = croniter(cron.strip(), moment.astimezone(zone))
        run = times.get_next(datetime)
        if previous is not None and _wall(run) == _wall(previous.astimezone(zone)):
            run = times.get_next(datetime)
    except ValueError as exc:  # croniter's errors, a time that never comes (31 April) too
        raise InvalidInput.field("cron", f"not a schedule cron can keep: {exc}") from exc
    return run.astimezone(UTC)


def _wall(moment: datetime) -> datetime:
    """The time a clock on the wall shows: the date and time without their offset."""
    return moment.replace(tzinfo=None)


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidInput.field("timezone", f"no IANA time zone is named {name!r}") from exc


def put_schedule(
    rt: Runtime,
    principal: Principal,
    spec: ScheduleSpec,
    *,
    trace_id: str,
    owner: str | None = None,
) -> tuple[Schedule, bool]:
    """Create or replace the caller's schedule of this name; (schedule, created)."""
    if owner not in (None, principal.name):
        # Its runs are submitted as its owner: what they submit is the owner's to say.
        raise Forbidden("only its owner puts a schedule; an operator may pause, run or delete it")
    if spec.job.not_before is not None:
        raise _within_job(
            InvalidInput.field("not_before", "a schedule's runs start at their own times")
        )
    if spec.job.depends_on:
        # Every run would wait for the same jobs, finished after the first run.
        raise _within_job(InvalidInput.field("depends_on", "a schedule's runs depend on no job"))
    try:
        # Refused now, rather than at every run.
        jobs.plan_job(rt, principal, _run_spec(spec.job, spec.name), trace_id=trace_id)
    except InvalidInput as exc:
        raise _within_job(exc) from exc
    with rt.pool.connection() as conn, conn.transaction():
        # One change to a user's schedules at a time, so the cap's count cannot be raced.
        locks.take_turn(conn, locks.SCHEDULES, str(principal.user_id))
        # The database's clock, not this host's: every coordinator reads the same one.
        next_run = next_run_after(spec.cron, database_now(conn), spec.timezone)
        existing = schedule_rows.get(conn, principal.user_id, spec.name)
        limit = rt.limits.user_max_schedules
        if existing is None and schedule_rows.count_for_owner(conn, principal.user_id) >= limit:
            raise Conflict(
                f"a user may have at most {limit} schedules (CHUNKWISE_USER_MAX_SCHEDULES)",
                code="schedule_limit",
                details={"limit": limit},
            )
        schedule, created = schedule_rows.put(
            conn,
            id=uuid.uuid4(),
            owner_id=principal.user_id,
            name=spec.name,
            cron=spec.cron.strip(),
            timezone=spec.timezone,
            job=_stored(spec.job),
            paused=spec.paused,
            next_run_at=next_run,
        )
        event_rows.audit(
            conn,
            actor=principal.name,
            action="schedule.put",
            target=str(schedule.id),
            details={
                "name": spec.name,
                "cron": schedule.cron,
                "timezone": spec.timezone,
                "paused": spec.paused,
            },
            trace_id=trace_id,
        )
    rt.schedules_changed.set()
    return schedule, created


def list_schedules(rt: Runtime, principal: Principal) -> list[ScheduleSummary]:
    """The caller's schedules by name; an operator's, everyone's by owner and name."""
    with rt.pool.connection() as conn:
        return schedule_rows.list_schedules(conn, principal.visible_owner)


def get_schedule(
    rt: Runtime, principal: Principal, name: str, *, owner: str | None = None
) -> Schedule:
    """The caller's schedule of this name (an operator's: the named owner's)."""
    with rt.pool.connection() as conn:
        return _find(conn, principal, name, owner)[1]


def pause_schedule(
    rt: Runtime,
    principal: Principal,
    name: str,
    *,
    paused: bool,
    trace_id: str,
    owner: str | None = None,
) -> Schedule:
    """Pause the caller's schedule (an operator's: the named owner's), or resume it from now."""
    with rt.pool.connection() as conn, conn.transaction():
        whose, schedule = _find(conn, principal, name, owner, for_update=True)
        next_run = next_run_after(schedule.cron, database_now(conn), schedule.timezone)
        changed = schedule_rows.set_paused(conn, schedule.id, paused=paused, next_run_at=next_run)
        event_rows.audit(
            conn,
            actor=principal.name,
            action="schedule.pause" if paused else "schedule.resume",
            target=str(schedule.id),
            details={"name": name, "owner": whose.name},
            trace_id=trace_id,
        )
    rt.schedules_changed.set()
    return changed


def run_schedule_now(
    rt: Runtime,
    principal: Principal,
    name: str,
    *,
    trace_id: str,
    idempotency_key: str | None = None,
    owner: str | None = None,
) -> jobs.JobView:
    """Submit the caller's schedule's job now (an operator's: the named owner's), as a run
    would: its owner's, paused or not; its times stay."""
    with rt.pool.connection() as conn:
        whose, schedule = _find(conn, principal, name, owner)
    spec = _run_spec(jobs.JobSpec.from_dict(schedule.job), schedule.name)
    view = jobs.create_job(rt, whose, spec, trace_id=trace_id, idempotency_key=idempotency_key)
    if view.created:
        with rt.pool.connection() as conn, conn.transaction():
            event_rows.audit(
                conn,
                actor=principal.name,
                action="schedule.run",
                target=str(schedule.id),
                details={"name": name, "owner": whose.name, "job_id": str(view.job.id)},
                trace_id=trace_id,
            )
    return view


def delete_schedule(
    rt: Runtime, principal: Principal, name: str, *, trace_id: str, owner: str | None = None
) -> None:
    """Delete the caller's schedule of this name (an operator's: the named owner's); the jobs
    it submitted stay."""
    with rt.pool.connection() as conn, conn.transaction():
        whose = _owner(conn, principal, owner)
        deleted = schedule_rows.delete(conn, whose.user_id, name)
        if deleted is None:
            raise NotFound(f"no schedule named {name!r}")
        event_rows.audit(
            conn,
            actor=principal.name,
            action="schedule.delete",
            target=str(deleted),
            details={"name": name, "owner": whose.name},
            trace_id=trace_id,
        )


def _find(
    conn: Connection,
    principal: Principal,
    name: str,
    owner: str | None,
    *,
    for_update: bool = False,
) -> tuple[Principal, Schedule]:
    """The schedule a call names, and whose it is (NotFound if there is none)."""
    whose = _owner(conn, principal, owner)
    schedule = schedule_rows.get(conn, whose.user_id, name, for_update=for_update)
    if schedule is None:
        raise NotFound(f"no schedule named {name!r}")
    return whose, schedule


def _owner(conn: Connection, principal: Principal, owner: str | None) -> Principal:
    """Whose schedule a call names: the caller's own, or (for an operator) the named user's."""
    if owner is None or owner == principal.name:
        return principal
    if not principal.is_operator:
        raise Forbidden("only an operator acts on another user's schedules")
    user = user_rows.find_user(conn, owner)
    if user is None:
        raise NotFound(f"no user is named {owner!r}")
    return Principal("user", user.name, user.id, user.role)


def run_due_schedules(rt: Runtime, now: datetime | None = None) -> int:
    """Submit the job of each schedule whose run has come; how many were submitted.

    The schedules stay locked while their jobs are submitted, each under an Idempotency-Key
    naming the schedule and the run's time: a pass that dies before its commit leaves the
    runs due, and the next pass's submits replay the jobs already made instead of adding more.
    """
    submitted = 0
    with rt.pool.connection() as conn, conn.transaction():
        # What is due is the database's to say: a host whose clock runs fast must not fire
        # runs early (nor, by computing the next run from its own now, skip one).
        now = now or database_now(conn)
        for due in schedule_rows.lock_due(conn, now=now, limit=RUNS_PER_PASS):
            job_id, error, next_run = _run(rt, due, now)
            waits = next_run == due.schedule.next_run_at  # for room in its queue
            schedule_rows.record_run(
                conn,
                due.schedule.id,
                ran_at=None if waits else due.schedule.next_run_at,
                next_run_at=next_run,
                job_id=job_id,
                error=error,
            )
            submitted += job_id is not None
    return submitted


def seconds_until_next_run(rt: Runtime, now: datetime | None = None) -> float | None:
    """Seconds until the soonest running schedule's next run, if one is still to come.

    Runs already due are left out: one waiting for room in a full queue is tried again by
    each maintenance pass, not at once and again.
    """
    with rt.pool.connection() as conn:
        now = now or database_now(conn)
        soonest = schedule_rows.soonest_run(conn, after=now)
    return None if soonest is None else (soonest - now).total_seconds()


def _run(
    rt: Runtime, due: DueSchedule, now: datetime
) -> tuple[uuid.UUID | None, dict | None, datetime]:
    """Submit one run's job: (its id or None, why not, when the schedule runs next)."""
    schedule = due.schedule
    slot = schedule.next_run_at
    owner = Principal("user", schedule.owner, schedule.owner_id, due.owner_role)
    log = {"schedule": schedule.name, "schedule_id": str(schedule.id), "slot": slot.isoformat()}
    # Times missed while no coordinator ran are made up by this one run, not one each.
    next_run = next_run_after(schedule.cron, max(now, slot), schedule.timezone, previous=slot)
    try:
        view = jobs.create_job(
            rt,
            owner,
            _run_spec(jobs.JobSpec.from_dict(schedule.job), schedule.name),
            trace_id=uuid.uuid4().hex,
            idempotency_key=f"schedule:{schedule.id}:{slot.isoformat()}",
        )
    except QueueFull as exc:
        # A late run beats a missed one: the same run is tried again by the next pass (one
        # past its owner's share too, QuotaExceeded, once their tasks have finished).
        logger.warning("scheduled run waits for room", extra={"event": "schedule_deferred", **log})
        return None, {"code": exc.code, "message": exc.message}, slot
    except (InvalidInput, Conflict) as exc:
        # A workload no longer allowed, a replay refused: trying again would fare no better.
        logger.error(
            "scheduled run refused",
            extra={"event": "schedule_refused", "code": exc.code, **log},
        )
        return None, {"code": exc.code, "message": exc.message}, next_run
    logger.info(
        "scheduled run submitted",
        extra={"event": "schedule_run", "job_id": str(view.job.id), **log},
    )
    return view.job.id, None, next_run


def _run_spec(job: jobs.JobSpec, name: str) -> jobs.JobSpec:
    """The job a run submits: the schedule's, labelled with the schedule's name."""
    labels = dict(job.labels or {})
    if SCHEDULE_LABEL in labels:
        raise InvalidInput.field("labels", f"the label {SCHEDULE_LABEL!r} names the schedule")
    return dataclasses.replace(job, labels={**labels, SCHEDULE_LABEL: name})


def _stored(job: jobs.JobSpec) -> dict:
    """A job spec as the schedules row keeps it (JSON)."""
    stored = dataclasses.asdict(job)
    del stored["not_before"], stored["depends_on"]
    return stored


def _within_job(exc: InvalidInput) -> InvalidInput:
    """The same refusal, its fields named within the schedule's `job`, as a body's are."""
    return InvalidInput(f"job.{exc.message}", details={"fields": {"job": exc.details["fields"]}})
