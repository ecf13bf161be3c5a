"""Users and their API tokens (stored only as SHA-256 digests)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from psycopg import Connection

from repositories import from_row


@dataclass(frozen=True)
class TokenOwner:
    """Who a live token belongs to: its user's name, or a worker credential's own."""

    token_id: int
    kind: str
    name: str
    user_id: int | None
    role: str | None
    token_sha256: str


def find_token_owner(conn: Connection, token_sha256: str) -> TokenOwner | None:
    """Return the owner of an unrevoked token with this digest."""
    row = conn.execute(
        """
        SELECT t.id AS token_id, t.kind, COALESCE(u.name, t.name) AS name, t.user_id, u.role,
               t.token_sha256
        FROM api_tokens t LEFT JOIN users u ON u.id = t.user_id
        WHERE t.token_sha256 = %(digest)s AND t.revoked_at IS NULL
        """,
        {"digest": token_sha256},
    ).fetchone()
    return from_row(TokenOwner, row) if row else None


def names(conn: Connection, user_ids: Collection[int]) -> dict[int, str]:
    """These users' names by id."""
    rows = conn.execute(
        "SELECT id, name FROM users WHERE id = ANY(%(ids)b)", {"ids": list(user_ids)}
    ).fetchall()
    return {r["id"]: r["name"] for r in rows}


def upsert_user(conn: Connection, name: str, role: str) -> int:
    """Create the user if missing (keeping an existing role) and return its id."""
    row = conn.execute(
        """
        INSERT INTO users (name, role) VALUES (%(name)s, %(role)s)
        ON CONFLICT ON CONSTRAINT users_name_key DO UPDATE SET name = EXCLUDED.name
        RETURNING id
        """,
        {"name": name, "role": role},
    ).fetchone()
    return row["id"]


def insert_user(conn: Connection, name: str, role: str) -> int | None:
    """Create a user; None when the name is taken."""
    row = conn.execute(
        """
        INSERT INTO users (name, role) VALUES (%(name)s, %(role)s)
        ON CONFLICT ON CONSTRAINT users_name_key DO NOTHING
        RETURNING id
        """,
        {"name": name, "role": role},
    ).fetchone()
    return row["id"] if row else None


def insert_token(
    conn: Connection, token_sha256: str, kind: str, name: str, user_id: int | None
) -> int | None:
    """Register a token digest and return its id; None when it is already registered."""
    row = conn.execute(
        """
        INSERT INTO api_tokens (token_sha256, kind, name, user_id)
        VALUES (%(digest)s, %(kind)s, %(name)s, %(user_id)s)
        ON CONFLICT ON CONSTRAINT api_tokens_token_sha256_key DO NOTHING
        RETURNING id
        """,
        {"digest": token_sha256, "kind": kind, "name": name, "user_id": user_id},
    ).fetchone()
    return row["id"] if row else None


def has_token(conn: Connection, kind: str, name: str) -> bool:
    """Whether a live token of this kind and name exists."""
    row = conn.execute(
        "SELECT 1 FROM api_tokens WHERE kind = %(kind)s AND name = %(name)s AND revoked_at IS NULL",
        {"kind": kind, "name": name},
    ).fetchone()
    return row is not None


@dataclass(frozen=True)
class TokenRecord:
    """A token as operators list it: never the token, nor its digest."""

    id: int
    kind: str
    name: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True)
class User:
    """One users row."""

    id: int
    name: str
    role: str


def find_user(conn: Connection, name: str) -> User | None:
    """The user with this name, or None."""
    row = conn.execute(
        "SELECT id, name, role FROM users WHERE name = %(name)s", {"name": name}
    ).fetchone()
    return from_row(User, row) if row else None


def list_tokens(conn: Connection, *, revoked: bool) -> list[TokenRecord]:
    """Tokens in the order they were issued: the live ones, and the revoked too if asked."""
    rows = conn.execute(
        """
        SELECT t.id, t.kind, COALESCE(u.name, t.name) AS name, t.created_at, t.revoked_at
        FROM api_tokens t LEFT JOIN users u ON u.id = t.user_id
        WHERE %(revoked)s OR t.revoked_at IS NULL
        ORDER BY t.id
        """,
        {"revoked": revoked},
    ).fetchall()
    return [from_row(TokenRecord, r) for r in rows]


def revoke_token(conn: Connection, token_id: int) -> TokenRecord | None:
    """Revoke a token (a revoked one keeps its first revocation time); None if no such id."""
    row = conn.execute(
        """
        WITH revoked AS (
            UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now())
            WHERE id = %(id)s
            RETURNING id, kind, name, user_id, created_at, revoked_at
        )
        SELECT t.id, t.kind, COALESCE(u.name, t.name) AS name, t.created_at, t.revoked_at
        FROM revoked t LEFT JOIN users u ON u.id = t.user_id
        """,
        {"id": token_id},
    ).fetchone()
    return from_row(TokenRecord, row) if row else None
