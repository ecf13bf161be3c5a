"""Schedules: a user's manifest job, submitted on a cron expression (sql/0022)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from psycopg import Connection, sql
from psycopg.types.json import Jsonb

from repositories import columns, from_row


@dataclass(frozen=True)
class Schedule:
    """One schedules row."""

    id: UUID
    owner_id: int
    owner: str  # the owner's name
    name: str
    cron: str
    timezone: str  # an IANA name the cron is read in
    job: dict
    paused: bool
    next_run_at: datetime
    last_run_at: datetime | None
    last_job_id: UUID | None
    last_error: dict | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class ScheduleSummary:
    """A schedule as its list shows it: without the job it submits (up to the 4 MiB body)."""

    id: UUID
    owner_id: int
    owner: str
    name: str
    cron: str
    timezone: str
    paused: bool
    next_run_at: datetime
    last_run_at: datetime | None
    last_job_id: UUID | None
    last_error: dict | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class DueSchedule:
    """A schedule whose next run has come, locked, with its owner's role for the run."""

    schedule: Schedule
    owner_role: str


# What the statements return of a schedule, as `s` (the owner's name comes from users):
# named, so a new column leaves them be once psycopg has prepared them
# (repositories/__init__.py).
_COLUMNS = columns(Schedule, "s", computed=("owner",))
# The same of the row a write returns, with no `s` to qualify them by.
_WRITTEN_COLUMNS = columns(Schedule, computed=("owner",))

_PUT = (
    sql.SQL("""
        INSERT INTO schedules (id, owner_id, name, cron, timezone, job, paused, next_run_at)
        VALUES (%(id)s, %(owner)s, %(name)s, %(cron)s, %(timezone)s, %(job)s, %(paused)s,
                %(next)s)
        ON CONFLICT ON CONSTRAINT schedules_owner_name_key DO UPDATE SET
            cron = EXCLUDED.cron, timezone = EXCLUDED.timezone, job = EXCLUDED.job,
            paused = EXCLUDED.paused,
            next_run_at = CASE
                WHEN (schedules.cron, schedules.timezone, schedules.paused)
                     = (EXCLUDED.cron, EXCLUDED.timezone, EXCLUDED.paused)
                THEN schedules.next_run_at ELSE EXCLUDED.next_run_at END,
            updated_at = now()
        -- xmax is 0 only on a row this statement inserted.
        RETURNING {}, xmax = 0 AS created,
            (SELECT name FROM users WHERE id = owner_id) AS owner
        """)
    .format(_WRITTEN_COLUMNS)
    .as_string()
)


def put(
    conn: Connection,
    *,
    id: UUID,
    owner_id: int,
    name: str,
    cron: str,
    timezone: str,
    job: dict,
    paused: bool,
    next_run_at: datetime,
) -> tuple[Schedule, bool]:
    """Create the owner's schedule of this name, or replace what it does; (schedule, created).

    A replacement with the same cron, time zone and paused state keeps its next run, so
    sending the same schedule again changes nothing; any other change runs next at
    `next_run_at`.
    """
    row = conn.execute(
        _PUT,
        {
            "id": id,
            "owner": owner_id,
            "name": name,
            "cron": cron,
            "timezone": timezone,
            "job": Jsonb(job),
            "paused": paused,
            "next": next_run_at,
        },
    ).fetchone()
    return from_row(Schedule, row), row["created"]


_GET_ONE = sql.SQL("""
    SELECT {columns}, u.name AS owner FROM schedules s JOIN users u ON u.id = s.owner_id
    WHERE s.owner_id = %(owner)s AND s.name = %(name)s
    {lock}""")
_GET = _GET_ONE.format(columns=_COLUMNS, lock=sql.SQL("")).as_string()
_GET_FOR_UPDATE = _GET_ONE.format(columns=_COLUMNS, lock=sql.SQL("FOR UPDATE OF s")).as_string()


def get(conn: Connection, owner_id: int, name: str, *, for_update: bool = False) -> Schedule | None:
    """The owner's schedule of this name (locked, for a change that depends on it)."""
    query = _GET_FOR_UPDATE if for_update else _GET
    row = conn.execute(query, {"owner": owner_id, "name": name}).fetchone()
    return from_row(Schedule, row) if row else None


def list_schedules(conn: Connection, owner_id: int | None) -> list[ScheduleSummary]:
    """One owner's schedules by name, or (None) everyone's by owner and name; never their jobs."""
    rows = conn.execute(
        """
        SELECT s.id, s.owner_id, u.name AS owner, s.name, s.cron, s.timezone, s.paused,
               s.next_run_at, s.last_run_at, s.last_job_id, s.last_error, s.created_at,
               s.updated_at
        FROM schedules s JOIN users u ON u.id = s.owner_id
        WHERE %(owner)s::bigint IS NULL OR s.owner_id = %(owner)s
        ORDER BY u.name, s.name
        """,
        {"owner": owner_id},
    ).fetchall()
    return [from_row(ScheduleSummary, r) for r in rows]


def count_for_owner(conn: Connection, owner_id: int) -> int:
    """How many schedules the owner has."""
    row = conn.execute(
        "SELECT count(*) AS n FROM schedules WHERE owner_id = %(owner)s", {"owner": owner_id}
    ).fetchone()
    return row["n"]


_SET_PAUSED = (
    sql.SQL("""
        -- On the right of SET, paused is the row's value before this update.
        UPDATE schedules SET paused = %(paused)s, updated_at = now(),
            next_run_at = CASE WHEN paused THEN %(next)s ELSE next_run_at END
        WHERE id = %(id)s
        RETURNING {}, (SELECT name FROM users WHERE id = owner_id) AS owner
        """)
    .format(_WRITTEN_COLUMNS)
    .as_string()
)


def set_paused(
    conn: Connection, schedule_id: UUID, *, paused: bool, next_run_at: datetime
) -> Schedule:
    """Pause or resume a schedule; one resumed runs next at `next_run_at`."""
    row = conn.execute(
        _SET_PAUSED,
        {"id": schedule_id, "paused": paused, "next": next_run_at},
    ).fetchone()
    return from_row(Schedule, row)


def delete(conn: Connection, owner_id: int, name: str) -> UUID | None:
    """Delete the owner's schedule of this name; its id, or None if there was none."""
    row = conn.execute(
        "DELETE FROM schedules WHERE owner_id = %(owner)s AND name = %(name)s RETURNING id",
        {"owner": owner_id, "name": name},
    ).fetchone()
    return row["id"] if row else None


def soonest_run(conn: Connection, *, after: datetime) -> datetime | None:
    """The soonest next run of a running schedule that is still to come after `after`."""
    row = conn.execute(
        """
        SELECT min(next_run_at) AS soonest FROM schedules
        WHERE NOT paused AND next_run_at > %(after)s
        """,
        {"after": after},
    ).fetchone()
    return row["soonest"]


_LOCK_DUE = (
    sql.SQL("""
        SELECT {}, u.name AS owner, u.role AS owner_role
        FROM schedules s JOIN users u ON u.id = s.owner_id
        WHERE NOT s.paused AND s.next_run_at <= %(now)s
        ORDER BY s.next_run_at
        LIMIT %(limit)s
        FOR UPDATE OF s SKIP LOCKED
        """)
    .format(_COLUMNS)
    .as_string()
)


def lock_due(conn: Connection, *, now: datetime, limit: int) -> list[DueSchedule]:
    """Lock the running schedules whose next run is at or before `now`, the most overdue
    first; SKIP LOCKED, so coordinators running passes at once share them out."""
    rows = conn.execute(
        _LOCK_DUE,
        {"now": now, "limit": limit},
    ).fetchall()
    return [DueSchedule(from_row(Schedule, r), r["owner_role"]) for r in rows]


def record_run(
    conn: Connection,
    schedule_id: UUID,
    *,
    ran_at: datetime | None,
    next_run_at: datetime,
    job_id: UUID | None,
    error: dict | None,
) -> None:
    """Note a run (the job it submitted, or why it could not) and when the next one is; a
    run still waiting (ran_at None) leaves the last run as it was."""
    conn.execute(
        """
        UPDATE schedules SET last_run_at = COALESCE(%(ran)s, last_run_at), next_run_at = %(next)s,
            last_job_id = COALESCE(%(job)s, last_job_id), last_error = %(error)s
        WHERE id = %(id)s
        """,
        {
            "id": schedule_id,
            "ran": ran_at,
            "next": next_run_at,
            "job": job_id,
            "error": Jsonb(error) if error is not None else None,
        },
    )
