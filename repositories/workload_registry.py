"""The workloads table (sql/0031): each served workload's caps, as seeded or as operators set."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg import Connection, sql

# The cap columns, in the order services.workloads.Caps declares them.
CAP_COLUMNS = (
    "max_leases_per_worker",
    "max_leases_total",
    "max_queued_tasks",
    "max_tasks_per_job",
    "max_starts_per_second",
    "max_queued_tasks_per_user",
    "max_stored_bytes_per_user",
)
_COLUMNS = sql.SQL(", ").join(map(sql.Identifier, CAP_COLUMNS))
_VALUES = sql.SQL(", ").join(map(sql.Placeholder, CAP_COLUMNS))
_FROM_EXCLUDED = sql.SQL(", ").join(
    sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in CAP_COLUMNS
)
_FROM_PARAMS = sql.SQL(", ").join(
    sql.SQL("{} = {}").format(sql.Identifier(c), sql.Placeholder(c)) for c in CAP_COLUMNS
)
# What the statements return of a workload (all _stored reads): named, so a new column leaves
# them be once psycopg has prepared them (repositories/__init__.py).
_STORED_COLUMNS = sql.SQL(", ").join(
    map(sql.Identifier, ("name", *CAP_COLUMNS, "changed_by", "changed_at"))
)


@dataclass(frozen=True)
class StoredWorkload:
    """A served workload's row: its caps by column, and who last changed them (None: seeded)."""

    name: str
    caps: dict
    changed_by: str | None
    changed_at: datetime


def _stored(row: dict) -> StoredWorkload:
    return StoredWorkload(
        row["name"], {c: row[c] for c in CAP_COLUMNS}, row["changed_by"], row["changed_at"]
    )


def seed(conn: Connection, name: str, caps: dict) -> None:
    """Store the settings' caps for a workload no operator has added, changed or removed."""
    conn.execute(
        sql.SQL(
            """
            INSERT INTO workloads (name, {columns}) VALUES (%(name)s, {values})
            ON CONFLICT (name) DO UPDATE SET {from_excluded}, changed_at = now()
            -- Unchanged rows are left alone: their trigger would wake every coordinator.
            WHERE workloads.changed_by IS NULL
              AND ({old}) IS DISTINCT FROM ({new})
            """
        ).format(
            columns=_COLUMNS,
            values=_VALUES,
            from_excluded=_FROM_EXCLUDED,
            old=sql.SQL(", ").join(sql.Identifier("workloads", c) for c in CAP_COLUMNS),
            new=sql.SQL(", ").join(sql.Identifier("excluded", c) for c in CAP_COLUMNS),
        ),
        {"name": name, **caps},
    )


def add(conn: Connection, name: str, caps: dict, added_by: str) -> StoredWorkload | None:
    """Add a workload (reviving a removed one of that name); None if one is served by it."""
    row = conn.execute(
        sql.SQL(
            """
            INSERT INTO workloads (name, {columns}, changed_by)
            VALUES (%(name)s, {values}, %(by)s)
            ON CONFLICT (name) DO UPDATE
                SET {from_excluded}, changed_by = EXCLUDED.changed_by, changed_at = now(),
                    removed_at = NULL
                WHERE workloads.removed_at IS NOT NULL
            RETURNING {stored}
            """
        ).format(
            columns=_COLUMNS, values=_VALUES, from_excluded=_FROM_EXCLUDED, stored=_STORED_COLUMNS
        ),
        {"name": name, "by": added_by, **caps},
    ).fetchone()
    return None if row is None else _stored(row)


_GET_ONE = sql.SQL(
    "SELECT {stored} FROM workloads WHERE name = %(name)s AND removed_at IS NULL {lock}"
)
_GET = _GET_ONE.format(stored=_STORED_COLUMNS, lock=sql.SQL("")).as_string()
_GET_FOR_UPDATE = _GET_ONE.format(stored=_STORED_COLUMNS, lock=sql.SQL("FOR UPDATE")).as_string()


def get(conn: Connection, name: str, *, for_update: bool = False) -> StoredWorkload | None:
    """A served workload's row, or None (also for a removed one)."""
    row = conn.execute(_GET_FOR_UPDATE if for_update else _GET, {"name": name}).fetchone()
    return None if row is None else _stored(row)


def change(conn: Connection, name: str, caps: dict, changed_by: str) -> StoredWorkload:
    """Store a served workload's new caps (the caller holds its row locked)."""
    row = conn.execute(
        sql.SQL(
            """
            UPDATE workloads SET {from_params}, changed_by = %(by)s, changed_at = now()
            WHERE name = %(name)s
            RETURNING {stored}
            """
        ).format(from_params=_FROM_PARAMS, stored=_STORED_COLUMNS),
        {"name": name, "by": changed_by, **caps},
    ).fetchone()
    return _stored(row)


def unfinished_jobs(conn: Connection, name: str) -> int:
    """How many of the workload's jobs are queued, running or merging."""
    row = conn.execute(
        """
        SELECT count(*) AS n FROM jobs
        WHERE workload = %(name)s AND status IN ('queued', 'running', 'merging')
        """,
        {"name": name},
    ).fetchone()
    return row["n"]


def remove(conn: Connection, name: str, removed_by: str) -> None:
    """Mark a workload removed (a seed never brings it back) and forget its pause, its bucket
    and its queue bound (admission finds no room without one, and counts again)."""
    conn.execute(
        """
        UPDATE workloads SET removed_at = now(), changed_by = %(by)s, changed_at = now()
        WHERE name = %(name)s
        """,
        {"name": name, "by": removed_by},
    )
    conn.execute("DELETE FROM workload_pauses WHERE workload = %(name)s", {"name": name})
    conn.execute("DELETE FROM workload_buckets WHERE workload = %(name)s", {"name": name})
    conn.execute("DELETE FROM queue_bounds WHERE workload = %(name)s", {"name": name})


_SERVED = (
    sql.SQL("SELECT {} FROM workloads WHERE removed_at IS NULL ORDER BY name")
    .format(_STORED_COLUMNS)
    .as_string()
)


def served(conn: Connection) -> list[StoredWorkload]:
    """Every served workload's row, by name."""
    rows = conn.execute(_SERVED).fetchall()
    return [_stored(r) for r in rows]
