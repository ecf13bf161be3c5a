"""Dashboard sessions: started by a user token, checked on every page, ended at once.

A session is a random id the browser holds; the database keeps only its SHA-256, so a
leaked database row opens nothing. There is no cache: every page asks the database (one
lookup by primary key), so a sign-out or a revocation on any coordinator ends the session on
all of them before their next page.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import timedelta

from psycopg_pool import ConnectionPool

from repositories import ui_sessions, users
from services.auth import Principal, principal_of_owner, token_digest
from services.errors import Forbidden, Unauthenticated

# Counted from sign-in, not from the last page seen.
LIFETIME = timedelta(hours=12)
# What secrets.token_urlsafe(32) draws: 256 bits as 43 URL-safe characters.
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{43}")


def start_session(pool: ConnectionPool, token: str) -> tuple[str, Principal]:
    """Check a typed user token and start a session for it; the new session's id and user."""
    digest = token_digest(token)
    session_id = secrets.token_urlsafe(32)
    with pool.connection() as conn, conn.transaction():
        owner = users.find_token_owner(conn, digest)
        # Compared again in constant time, as services.auth does for bearer tokens.
        if owner is None or not hmac.compare_digest(owner.token_sha256, digest):
            raise Unauthenticated("a valid bearer token is required")
        if owner.kind == "worker":
            raise Forbidden("worker tokens cannot sign in to the dashboard")
        ui_sessions.insert_session(conn, _digest(session_id), owner.token_id, LIFETIME)
    return session_id, principal_of_owner(owner)


def session_principal(pool: ConnectionPool, session_id: object) -> Principal | None:
    """The user of a live session, or None for any id that names none (nothing is written)."""
    if not isinstance(session_id, str) or not SESSION_ID.fullmatch(session_id):
        return None
    with pool.connection() as conn:
        owner = ui_sessions.find_session_owner(conn, _digest(session_id))
    return principal_of_owner(owner) if owner is not None else None


def end_session(pool: ConnectionPool, session_id: object) -> None:
    """End a session at once, for every coordinator."""
    if isinstance(session_id, str) and SESSION_ID.fullmatch(session_id):
        with pool.connection() as conn:
            ui_sessions.delete_session(conn, _digest(session_id))


def delete_expired_sessions(pool: ConnectionPool) -> int:
    """Delete the sessions whose lifetime is over; how many went."""
    with pool.connection() as conn:
        return ui_sessions.delete_expired(conn)


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()
