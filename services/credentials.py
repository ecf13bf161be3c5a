"""Credentials: users, their tokens and worker tokens, issued, listed and revoked.

Each change is in the audit log, in its own transaction: who (the command line), what and
which token; never the token itself, which is shown once and stored only as its SHA-256.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from psycopg import Connection
from psycopg_pool import ConnectionPool

from repositories import events, ui_sessions, users
from services.auth import USER_PREFIX, WORKER_PREFIX, token_digest
from services.errors import InvalidInput, NotFound

# The actor of every audit row these commands write: they run beside the database, not as
# any API principal.
ACTOR = "command line"
# A given token needs at least this much secret after its prefix (new_token makes 43).
MIN_GIVEN_SECRET = 32
# Text that marks a token copied from an example rather than generated (seed-local's tokens,
# CHUNKWISE_METRICS_TOKEN).
PLACEHOLDER_MARKS = ("change-me", "changeme")


@dataclass(frozen=True)
class IssuedToken:
    """A token shown to its owner once; only its digest is stored."""

    name: str
    kind: str
    token: str
    created: bool


def new_token(kind: str) -> str:
    """Generate a high-entropy token whose prefix says what it is for."""
    return (WORKER_PREFIX if kind == "worker" else USER_PREFIX) + secrets.token_urlsafe(32)


def seed_local(
    pool: ConnectionPool,
    *,
    user_token: str | None,
    operator_token: str | None,
    worker_token: str | None,
    keep: Callable[[list[IssuedToken]], None] | None = None,
) -> list[IssuedToken]:
    """Create compute_user, operator and a worker credential; idempotent.

    A given token is registered as is, unless it is a placeholder or too short to be secret
    (InvalidInput naming each bad one: user_token, operator_token, worker_token); a missing one
    is generated only when the principal has no token yet, so re-running never mints a second
    credential by surprise. The generated ones are handed to keep before the registration
    commits, and only when there are some: whatever keep raises rolls every change back, so a
    token is never registered without its owner having it. Without keep, the caller keeps them
    from the returned list (in-process callers: tests, benchmarks).
    """
    given = {"user_token": user_token, "operator_token": operator_token}
    problems = {field: weakness_of(token, "user") for field, token in given.items()}
    problems["worker_token"] = weakness_of(worker_token, "worker")
    problems = {field: [problem] for field, problem in problems.items() if problem}
    if problems:
        named = "; ".join(f"{field}: {p}" for field, [p] in problems.items())
        raise InvalidInput(named, details={"fields": problems})
    wanted = [
        ("compute_user", "user", "user", user_token),
        ("operator", "user", "operator", operator_token),
        ("local-worker", "worker", None, worker_token),
    ]
    issued, minted = [], []
    with pool.connection() as conn, conn.transaction():
        for name, kind, role, token in wanted:
            user_id = users.upsert_user(conn, name, role) if role else None
            if token is None and users.has_token(conn, kind, name):
                continue
            secret = token or new_token(kind)
            created = _register(conn, secret, kind, name, user_id)
            issued.append(IssuedToken(name=name, kind=kind, token=secret, created=created))
            if token is None:
                minted.append(issued[-1])
        if minted and keep:
            keep(minted)
    return issued


def weakness_of(token: str | None, kind: str) -> str | None:
    """Why a token given to seed-local must not be registered, or None when it may be."""
    if token is None:
        return None
    prefix = WORKER_PREFIX if kind == "worker" else USER_PREFIX
    if not token.startswith(prefix):
        return f"must start with {prefix}"
    if any(mark in token.lower() for mark in PLACEHOLDER_MARKS):
        return "is a placeholder (it says change-me): generate a secret"
    if len(token) - len(prefix) < MIN_GIVEN_SECRET:
        return f"needs at least {MIN_GIVEN_SECRET} characters of secret after {prefix}"
    return None


def create_user(pool: ConnectionPool, name: str, role: str) -> IssuedToken:
    """Create a user with a fresh token."""
    _check_name(name)
    if role not in ("user", "operator"):
        raise InvalidInput.field("role", "must be user or operator")
    token = new_token("user")
    with pool.connection() as conn, conn.transaction():
        user_id = users.insert_user(conn, name, role)
        if user_id is None:
            raise InvalidInput.field("name", f"a user named {name!r} already exists")
        _audit(conn, "user.create", f"user {name}", {"role": role})
        _register(conn, token, "user", name, user_id)
    return IssuedToken(name=name, kind="user", token=token, created=True)


def issue_token(pool: ConnectionPool, user_name: str) -> IssuedToken:
    """A further token for an existing user; the user's other tokens stay live until revoked."""
    token = new_token("user")
    with pool.connection() as conn, conn.transaction():
        user = users.find_user(conn, user_name)
        if user is None:
            raise NotFound(f"no user is named {user_name!r}")
        _register(conn, token, "user", user_name, user.id)
    return IssuedToken(name=user_name, kind="user", token=token, created=True)


def issue_worker_token(pool: ConnectionPool, name: str) -> IssuedToken:
    """A new worker credential; its name (several may share one) names it in logs and audit."""
    _check_name(name)
    token = new_token("worker")
    with pool.connection() as conn, conn.transaction():
        _register(conn, token, "worker", name, None)
    return IssuedToken(name=name, kind="worker", token=token, created=True)


def list_tokens(pool: ConnectionPool, *, revoked: bool = False) -> list[users.TokenRecord]:
    """Every live token (and the revoked ones if asked), without the secrets."""
    with pool.connection() as conn:
        return users.list_tokens(conn, revoked=revoked)


def revoke_token(pool: ConnectionPool, token_id: int) -> users.TokenRecord:
    """Revoke a token and end the dashboard sessions signed in with it; every coordinator
    refuses the token as soon as it hears (sql/0009)."""
    with pool.connection() as conn, conn.transaction():
        record = users.revoke_token(conn, token_id)
        if record is None:
            raise NotFound(f"no token has the id {token_id}")
        ui_sessions.delete_for_token(conn, token_id)
        _audit(conn, "token.revoke", f"token {token_id}", {"kind": record.kind})
    return record


def _register(conn: Connection, token: str, kind: str, name: str, user_id: int | None) -> bool:
    # False when the token is already registered (seed-local given the same token again).
    token_id = users.insert_token(conn, token_digest(token), kind, name, user_id)
    if token_id is not None:
        _audit(conn, "token.issue", f"token {token_id}", {"kind": kind, "name": name})
    return token_id is not None


def _audit(conn: Connection, action: str, target: str, details: dict) -> None:
    events.audit(
        conn, actor=ACTOR, action=action, target=target, details=details, trace_id=uuid.uuid4().hex
    )


def _check_name(name: str) -> None:
    # The name a principal is known by in logs, audit rows and the job list's owner filter.
    if not 1 <= len(name) <= 200 or not name.isprintable() or name.isspace():
        raise InvalidInput.field("name", "must be 1-200 printable characters, not only spaces")
