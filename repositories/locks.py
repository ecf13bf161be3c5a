"""Transaction-level advisory locks: turns that writers of one workload take one at a time."""

from __future__ import annotations

from psycopg import Connection

# The first key says what the turn is for; the second is the workload's name, hashed.
CLAIM = 0x43484B57  # "CHKW": claiming tasks of a workload with lease caps


def take_turn(conn: Connection, purpose: int, workload: str) -> None:
    """Wait for this transaction's turn at `purpose` for one workload; it ends at commit."""
    conn.execute(
        "SELECT pg_advisory_xact_lock(%(purpose)s, hashtext(%(workload)s))",
        {"purpose": purpose, "workload": workload},
    )
