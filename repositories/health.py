"""What the database can tell about its own readiness."""

from __future__ import annotations

from psycopg import Connection


def applied_migrations(conn: Connection) -> set[str]:
    """Ids of the yoyo migrations applied to this database (empty before the first)."""
    exists = conn.execute("SELECT to_regclass('_yoyo_migration') IS NOT NULL AS ok").fetchone()
    if not exists["ok"]:
        return set()
    rows = conn.execute("SELECT migration_id FROM _yoyo_migration").fetchall()
    return {r["migration_id"] for r in rows}
