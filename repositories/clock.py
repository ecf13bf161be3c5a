"""The database's clock: the one every coordinator reads, so that hosts whose clocks
disagree still agree on what is due."""

from __future__ import annotations

from datetime import datetime

from psycopg import Connection


def database_now(conn: Connection) -> datetime:
    """The database server's time as this statement runs (not the transaction's start)."""
    return conn.execute("SELECT clock_timestamp() AS now").fetchone()["now"]
