"""Coordinator processes on this database, each as it last checked in (sql/0029)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg import Connection, sql
from psycopg.types.json import Jsonb

from repositories import columns, from_row


@dataclass(frozen=True)
class CoordinatorRow:
    """One coordinators row."""

    id: str
    host: str
    pid: int
    version: str
    started_at: datetime
    last_seen_at: datetime
    expires_at: datetime
    fingerprint: str
    setting_digests: dict  # setting name -> digest of its value


# What the statements return of a coordinator, as `c`: named, so a new column leaves them be
# once psycopg has prepared them (repositories/__init__.py).
_COLUMNS = columns(CoordinatorRow, "c")

_CHECK_IN = (
    sql.SQL("""
        INSERT INTO coordinators AS c
            (id, host, pid, version, expires_at, fingerprint, setting_digests)
        VALUES (%(id)s, %(host)s, %(pid)s, %(version)s,
                now() + make_interval(secs => %(live)s), %(fingerprint)s, %(digests)s)
        ON CONFLICT (id) DO UPDATE SET
            last_seen_at = now(), expires_at = EXCLUDED.expires_at,
            fingerprint = EXCLUDED.fingerprint, setting_digests = EXCLUDED.setting_digests
        RETURNING {}
        """)
    .format(_COLUMNS)
    .as_string()
)
_LIVE_BEFORE = (
    sql.SQL("""
        SELECT {} FROM coordinators c
        LEFT JOIN coordinators me ON me.id = %(id)s
        WHERE c.id <> %(id)s AND c.expires_at > now()
          AND (me.id IS NULL OR (c.started_at, c.id) < (me.started_at, me.id))
        ORDER BY c.started_at, c.id
        """)
    .format(_COLUMNS)
    .as_string()
)


def check_in(
    conn: Connection,
    *,
    id: str,
    host: str,
    pid: int,
    version: str,
    fingerprint: str,
    setting_digests: dict[str, str],
    live_seconds: float,
) -> CoordinatorRow:
    """Record the coordinator as seen now and live for `live_seconds` more; its first check-in
    is its start."""
    row = conn.execute(
        _CHECK_IN,
        {
            "id": id,
            "host": host,
            "pid": pid,
            "version": version,
            "live": live_seconds,
            "fingerprint": fingerprint,
            "digests": Jsonb(setting_digests),
        },
    ).fetchone()
    return from_row(CoordinatorRow, row)


def live_before(conn: Connection, coordinator_id: str) -> list[CoordinatorRow]:
    """The live coordinators that started before this one (every live other, if it has no row),
    the first started first."""
    rows = conn.execute(_LIVE_BEFORE, {"id": coordinator_id}).fetchall()
    return [from_row(CoordinatorRow, r) for r in rows]


def check_out(conn: Connection, coordinator_id: str) -> None:
    """Delete the coordinator's row: it is stopping."""
    conn.execute("DELETE FROM coordinators WHERE id = %(id)s", {"id": coordinator_id})


def delete_expired(conn: Connection, kept_seconds: int) -> int:
    """Delete the rows of coordinators dead for `kept_seconds`; how many."""
    cursor = conn.execute(
        "DELETE FROM coordinators WHERE expires_at < now() - make_interval(secs => %(kept)s)",
        {"kept": kept_seconds},
    )
    return cursor.rowcount
