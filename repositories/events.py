"""The outbox (events announced in the transaction of their change) and the audit log."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from psycopg import Connection, sql
from psycopg.types.json import Jsonb

from repositories import columns, from_row
from repositories.jobs import Job


@dataclass(frozen=True)
class Event:
    """One outbox row."""

    id: int
    job_id: UUID
    owner_id: int
    event: str
    payload: dict
    trace_id: str
    created_at: datetime


def publish(
    conn: Connection, *, job_id: UUID, owner_id: int, event: str, payload: dict, trace_id: str
) -> None:
    """Write an event in the caller's transaction."""
    conn.execute(
        """
        INSERT INTO outbox (job_id, owner_id, event, payload, trace_id)
        VALUES (%(job)s, %(owner)s, %(event)s, %(payload)s, %(trace)s)
        """,
        {
            "job": job_id,
            "owner": owner_id,
            "event": event,
            "payload": Jsonb(payload),
            "trace": trace_id,
        },
    )


def publish_many(conn: Connection, events: Sequence[dict]) -> None:
    """Write events (each a dict of publish()'s arguments) in one statement."""
    conn.execute(
        """
        INSERT INTO outbox (job_id, owner_id, event, payload, trace_id)
        SELECT e.job_id, e.owner_id, e.event, e.payload, e.trace_id
        FROM unnest(%(jobs)b::uuid[], %(owners)b::bigint[], %(events)b::text[],
                    %(payloads)b::jsonb[], %(traces)b::text[])
             AS e(job_id, owner_id, event, payload, trace_id)
        """,
        {
            "jobs": [e["job_id"] for e in events],
            "owners": [e["owner_id"] for e in events],
            "events": [e["event"] for e in events],
            "payloads": [Jsonb(e["payload"]) for e in events],
            "traces": [e["trace_id"] for e in events],
        },
        prepare=True,
    )


# A page of one type of event reads this many events of every type at most, so a follower
# of a rare type (job.failed) beside a million chunk.completed never waits on a long scan.
SCAN_LIMIT = 10_000


@dataclass(frozen=True)
class EventPage:
    """A page of the feed, and the id to read on from."""

    events: list[Event]
    # The last event read; past the last one of the wrong types when a page is not full.
    next_after: int


# The feed's page, its events' columns named (as `outbox`, `scanned` and `w`), so a new
# column leaves it be once psycopg has prepared it (repositories/__init__.py); xact orders it.
_LIST_EVENTS = (
    sql.SQL("""
        WITH mark AS (
            SELECT coalesce(
                (SELECT xact FROM outbox WHERE id <= %(after)s ORDER BY id DESC LIMIT 1), '0'
            ) AS xact
        ), scanned AS (
            SELECT {outbox}, outbox.xact FROM outbox, mark
            WHERE (outbox.xact, outbox.id) > (mark.xact, %(after)s)
              AND outbox.xact < pg_snapshot_xmin(pg_current_snapshot())
              AND (%(owner)s::bigint IS NULL OR owner_id = %(owner)s)
              AND (%(job)s::uuid IS NULL OR job_id = %(job)s)
            ORDER BY outbox.xact, outbox.id LIMIT %(scan)s
        ), wanted AS (
            SELECT {scanned}, xact FROM scanned
            WHERE %(types)s::text[] IS NULL OR event = ANY(%(types)s)
            ORDER BY xact, id LIMIT %(limit)s
        )
        -- One row even when nothing is wanted, to carry how far the scan went.
        SELECT {w}, (SELECT id FROM scanned ORDER BY xact DESC, id DESC LIMIT 1) AS scanned_to
        FROM (VALUES (1)) AS one LEFT JOIN wanted w ON true
        ORDER BY w.xact, w.id
        """)
    .format(outbox=columns(Event, "outbox"), scanned=columns(Event), w=columns(Event, "w"))
    .as_string()
)


def list_events(
    conn: Connection,
    *,
    owner_id: int | None,
    after: int,
    limit: int,
    job_id: UUID | None = None,
    types: Sequence[str] | None = None,
) -> EventPage:
    """Events after the event `after` in the feed's order (only the owner's when owner_id is
    given, one job's when job_id is, of these types when types are), among those whose
    transactions finished before any still running began.

    The order is (transaction id, id) rather than id alone: ids are drawn as events are
    written, so a later id can commit first, but a transaction that commits later has a larger
    transaction id than every one already finished (sql/0018). An `after` no event has (one
    retention deleted, or past the last) stands for the last event before it. With types, at
    most SCAN_LIMIT events are read, and a page short of `limit` moves on past all of them.
    """
    rows = conn.execute(
        _LIST_EVENTS,
        {
            "after": after,
            "owner": owner_id,
            "job": job_id,
            "types": list(types) if types else None,
            "limit": limit,
            "scan": max(limit, SCAN_LIMIT) if types else limit,
        },
    ).fetchall()
    events = [from_row(Event, r) for r in rows if r["id"] is not None]
    if len(events) == limit:
        return EventPage(events, events[-1].id)
    return EventPage(events, rows[0]["scanned_to"] or after)


def record(
    conn: Connection,
    *,
    job: Job,
    event: str,
    payload: dict,
    actor: str,
    action: str,
    trace_id: str,
) -> None:
    """Tell a job's owner in the outbox and the operators in the audit log, in one statement."""
    conn.execute(
        """
        WITH announced AS (
            INSERT INTO outbox (job_id, owner_id, event, payload, trace_id)
            VALUES (%(job)s, %(owner)s, %(event)s, %(payload)s, %(trace)s)
        )
        INSERT INTO audit_log (actor, action, target, trace_id)
        VALUES (%(actor)s, %(action)s, %(job)s::text, %(trace)s)
        """,
        {
            "job": job.id,
            "owner": job.owner_id,
            "event": event,
            "payload": Jsonb(payload),
            "actor": actor,
            "action": action,
            "trace": trace_id,
        },
    )


def audit(
    conn: Connection, *, actor: str, action: str, target: str, details: dict, trace_id: str
) -> None:
    """Tell the operators in the audit log, in the caller's transaction."""
    conn.execute(
        """
        INSERT INTO audit_log (actor, action, target, trace_id, details)
        VALUES (%(actor)s, %(action)s, %(target)s, %(trace)s, %(details)s)
        """,
        {
            "actor": actor,
            "action": action,
            "target": target,
            "trace": trace_id,
            "details": Jsonb(details),
        },
    )
