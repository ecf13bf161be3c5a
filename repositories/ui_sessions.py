"""The dashboard's sessions (sql/0027), each named by the SHA-256 of its random id."""

from __future__ import annotations

from datetime import timedelta

from psycopg import Connection

from repositories import from_row
from repositories.users import TokenOwner


def insert_session(conn: Connection, id_sha256: str, token_id: int, lifetime: timedelta) -> None:
    """Start a session for a token, ending `lifetime` from now."""
    conn.execute(
        """
        INSERT INTO ui_sessions (id_sha256, token_id, expires_at)
        VALUES (%(digest)s, %(token_id)s, now() + %(lifetime)s)
        """,
        {"digest": id_sha256, "token_id": token_id, "lifetime": lifetime},
    )


def find_session_owner(conn: Connection, id_sha256: str) -> TokenOwner | None:
    """The owner of the live, unexpired session with this digest, by its unrevoked token."""
    row = conn.execute(
        """
        SELECT t.id AS token_id, t.kind, COALESCE(u.name, t.name) AS name, t.user_id, u.role,
               t.token_sha256
        FROM ui_sessions s
        JOIN api_tokens t ON t.id = s.token_id AND t.revoked_at IS NULL
        LEFT JOIN users u ON u.id = t.user_id
        WHERE s.id_sha256 = %(digest)s AND s.expires_at > now()
        """,
        {"digest": id_sha256},
    ).fetchone()
    return from_row(TokenOwner, row) if row else None


def delete_session(conn: Connection, id_sha256: str) -> int:
    """End one session; how many rows went (0 or 1)."""
    return conn.execute(
        "DELETE FROM ui_sessions WHERE id_sha256 = %(digest)s", {"digest": id_sha256}
    ).rowcount


def delete_for_token(conn: Connection, token_id: int) -> int:
    """End every session signed in with this token; how many went."""
    return conn.execute(
        "DELETE FROM ui_sessions WHERE token_id = %(token_id)s", {"token_id": token_id}
    ).rowcount


def delete_expired(conn: Connection) -> int:
    """Delete the sessions whose time is up; how many went."""
    return conn.execute("DELETE FROM ui_sessions WHERE expires_at <= now()").rowcount
