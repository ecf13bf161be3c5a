"""The planner's statistics of the tables a queue grows fastest: tasks and their attempts."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import Connection, errors

GROWING = ("tasks", "task_attempts")
_ANALYZE = {"tasks": "ANALYZE tasks", "task_attempts": "ANALYZE task_attempts"}


@dataclass(frozen=True)
class TableSize:
    """A table's rows as the planner last learnt them (-1: never analysed) and as now counted,
    and whether this role may analyse it (its owner, or a superuser)."""

    table: str
    planned: float
    live: int
    analysable: bool


def sizes(conn: Connection) -> list[TableSize]:
    """The growing tables' sizes; `live` is the statistics collector's count, which trails a
    commit by up to a few seconds."""
    rows = conn.execute(
        """
        SELECT c.relname AS table, c.reltuples AS planned, coalesce(s.n_live_tup, 0) AS live,
               pg_has_role(c.relowner, 'USAGE') OR r.rolsuper AS analysable
        FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
        JOIN pg_roles r ON r.rolname = current_user
        WHERE c.oid = ANY(%s::regclass[])
        ORDER BY c.relname
        """,
        [list(GROWING)],
    ).fetchall()
    return [TableSize(r["table"], r["planned"], r["live"], r["analysable"]) for r in rows]


def analyze(conn: Connection, table: str, lock_timeout: str) -> bool:
    """Refresh one growing table's statistics; False, having done nothing, when another pass
    (autovacuum's, say) holds the table's maintenance lock longer than lock_timeout."""
    try:
        with conn.transaction():
            conn.execute("SELECT set_config('lock_timeout', %s, true)", [lock_timeout])
            conn.execute(_ANALYZE[table])
    except errors.LockNotAvailable:
        return False
    return True
