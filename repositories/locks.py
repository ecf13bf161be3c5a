"""Transaction-level advisory locks: turns that writers of one thing take one at a time."""

from __future__ import annotations

from collections.abc import Sequence

from psycopg import Connection

# The first key says what the turn is for; the second names the thing, hashed.
CLAIM = 0x43484B57  # "CHKW": claiming tasks of a workload (its name) with lease caps
SCHEDULES = 0x43485343  # "CHSC": adding a schedule to a user's (their id) under the cap
DEPENDENTS = 0x43484450  # "CHDP": deciding a dependent job's fate by its prerequisites (its id)


def take_turn(conn: Connection, purpose: int, key: str) -> None:
    """Wait for this transaction's turn at `purpose` for one thing; it ends at commit."""
    conn.execute(
        "SELECT pg_advisory_xact_lock(%(purpose)s, hashtext(%(key)s))",
        {"purpose": purpose, "key": key},
    )


def take_turns(conn: Connection, purpose: int, keys: Sequence[str]) -> None:
    """Wait for this transaction's turn at `purpose` for each of these things, in key order (a
    sorted select list is evaluated after the sort), as one statement."""
    conn.execute(
        """
        SELECT pg_advisory_xact_lock(%(purpose)s, hashtext(k))
        FROM unnest(%(keys)s::text[]) AS k
        ORDER BY k COLLATE "C"
        """,
        {"purpose": purpose, "keys": list(keys)},
    )
