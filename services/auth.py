"""Bearer tokens: issuing, hashing, and resolving them to a principal."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from psycopg_pool import ConnectionPool

from repositories import users
from services.errors import InvalidInput, Unauthenticated

USER_PREFIX = "cwu_"
WORKER_PREFIX = "cww_"


@dataclass(frozen=True)
class Principal:
    """Who is calling: a user (role user or operator) or a worker credential."""

    kind: str
    name: str
    user_id: int | None
    role: str

    @property
    def is_operator(self) -> bool:
        """Operators see every user's jobs and the queue views."""
        return self.role == "operator"


@dataclass(frozen=True)
class IssuedToken:
    """A token shown to its owner once; only its digest is stored."""

    name: str
    kind: str
    token: str
    created: bool


def token_digest(token: str) -> str:
    """Return the hex SHA-256 under which a token is stored."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token(kind: str) -> str:
    """Generate a high-entropy token whose prefix says what it is for."""
    return (WORKER_PREFIX if kind == "worker" else USER_PREFIX) + secrets.token_urlsafe(32)


def authenticate(pool: ConnectionPool, token: str | None) -> Principal:
    """Resolve a bearer token to its principal, or raise Unauthenticated."""
    if not token or not token.startswith((USER_PREFIX, WORKER_PREFIX)):
        raise Unauthenticated("a valid bearer token is required")
    digest = token_digest(token)
    with pool.connection() as conn:
        owner = users.find_token_owner(conn, digest)
    # The lookup is by digest; comparing the digests again in constant time keeps any
    # index-lookup timing from telling an attacker how close a guess was.
    if owner is None or not hmac.compare_digest(owner.token_sha256, digest):
        raise Unauthenticated("a valid bearer token is required")
    if owner.kind == "worker":
        return Principal(kind="worker", name=owner.name, user_id=None, role="worker")
    return Principal(kind="user", name=owner.name, user_id=owner.user_id, role=owner.role)


def seed_local(
    pool: ConnectionPool,
    *,
    user_token: str | None,
    operator_token: str | None,
    worker_token: str | None,
) -> list[IssuedToken]:
    """Create compute_user, operator and a worker credential; idempotent.

    A given token is registered as is; a missing one is generated only when the principal
    has no token yet, so re-running never mints a second credential by surprise.
    """
    wanted = [
        ("compute_user", "user", "user", user_token),
        ("operator", "user", "operator", operator_token),
        ("local-worker", "worker", None, worker_token),
    ]
    issued = []
    with pool.connection() as conn, conn.transaction():
        for name, kind, role, token in wanted:
            user_id = users.upsert_user(conn, name, role) if role else None
            if token is None and users.has_token(conn, kind, name):
                continue
            token = token or new_token(kind)
            created = users.insert_token(conn, token_digest(token), kind, name, user_id)
            issued.append(IssuedToken(name=name, kind=kind, token=token, created=created))
    return issued


def create_user(pool: ConnectionPool, name: str, role: str) -> IssuedToken:
    """Create a user with a fresh token."""
    if role not in ("user", "operator"):
        raise InvalidInput.field("role", "must be user or operator")
    token = new_token("user")
    with pool.connection() as conn, conn.transaction():
        user_id = users.insert_user(conn, name, role)
        if user_id is None:
            raise InvalidInput.field("name", f"a user named {name!r} already exists")
        users.insert_token(conn, token_digest(token), "user", name, user_id)
    return IssuedToken(name=name, kind="user", token=token, created=True)
