"""Bearer tokens: issuing, hashing, and resolving them to a principal."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from psycopg_pool import ConnectionPool

from repositories import users
from services.errors import InvalidInput, NotFound, Unauthenticated

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


class KnownPrincipals:
    """Whom recently seen tokens belong to, so most requests need not ask the database.

    Everything is forgotten whenever credentials change: the process's listener hears it from
    sql/0009's triggers, and forgets too when it reconnects, having perhaps missed one. Each
    entry is also forgotten `seconds` after its lookup, should the listener be cut off
    without knowing it yet. Only tokens that exist are kept, at most `most` of them.
    """

    def __init__(
        self, seconds: float, *, most: int = 10_000, clock: Callable[[], float] = time.monotonic
    ):
        self._seconds = seconds
        self._most = most
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[float, Principal]] = {}
        # Counts forget_all() calls, so a lookup that raced one is not kept.
        self._generation = 0

    def generation(self) -> int:
        """Pass to remember() what this was before the database was asked."""
        with self._lock:
            return self._generation

    def get(self, digest: str) -> Principal | None:
        """The principal of a token digest, if it is known and fresh."""
        with self._lock:
            entry = self._entries.get(digest)
            if entry is None:
                return None
            expires, principal = entry
            if expires > self._clock():
                return principal
            del self._entries[digest]
            return None

    def remember(self, digest: str, principal: Principal, generation: int) -> None:
        """Keep a principal looked up under `generation`, unless credentials changed since."""
        if self._seconds <= 0:
            return
        with self._lock:
            if generation != self._generation:
                return
            if len(self._entries) >= self._most:
                self._entries.clear()
            self._entries[digest] = (self._clock() + self._seconds, principal)

    def forget_all(self) -> None:
        """Credentials changed somewhere: ask the database again for every token."""
        with self._lock:
            self._generation += 1
            self._entries.clear()


def authenticate(
    pool: ConnectionPool, token: str | None, known: KnownPrincipals | None = None
) -> Principal:
    """Resolve a bearer token to its principal, or raise Unauthenticated."""
    if not token or not token.startswith((USER_PREFIX, WORKER_PREFIX)):
        raise Unauthenticated("a valid bearer token is required")
    return principal_of_digest(pool, token_digest(token), known)


def principal_of_digest(
    pool: ConnectionPool, digest: str, known: KnownPrincipals | None = None
) -> Principal:
    """Resolve a token's digest (what the dashboard's session keeps) to its principal."""
    known = known or KnownPrincipals(0)
    principal = known.get(digest)
    if principal is not None:
        return principal
    generation = known.generation()
    with pool.connection() as conn:
        owner = users.find_token_owner(conn, digest)
    # The lookup is by digest; comparing the digests again in constant time keeps any
    # index-lookup timing from telling an attacker how close a guess was.
    if owner is None or not hmac.compare_digest(owner.token_sha256, digest):
        raise Unauthenticated("a valid bearer token is required")
    if owner.kind == "worker":
        principal = Principal(kind="worker", name=owner.name, user_id=None, role="worker")
    else:
        principal = Principal(kind="user", name=owner.name, user_id=owner.user_id, role=owner.role)
    known.remember(digest, principal, generation)
    return principal


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
    _check_name(name)
    if role not in ("user", "operator"):
        raise InvalidInput.field("role", "must be user or operator")
    token = new_token("user")
    with pool.connection() as conn, conn.transaction():
        user_id = users.insert_user(conn, name, role)
        if user_id is None:
            raise InvalidInput.field("name", f"a user named {name!r} already exists")
        users.insert_token(conn, token_digest(token), "user", name, user_id)
    return IssuedToken(name=name, kind="user", token=token, created=True)


def issue_token(pool: ConnectionPool, user_name: str) -> IssuedToken:
    """A further token for an existing user; the user's other tokens stay live until revoked."""
    token = new_token("user")
    with pool.connection() as conn, conn.transaction():
        user_id = users.user_id(conn, user_name)
        if user_id is None:
            raise NotFound(f"no user is named {user_name!r}")
        users.insert_token(conn, token_digest(token), "user", user_name, user_id)
    return IssuedToken(name=user_name, kind="user", token=token, created=True)


def issue_worker_token(pool: ConnectionPool, name: str) -> IssuedToken:
    """A new worker credential; its name (several may share one) names it in logs and audit."""
    _check_name(name)
    token = new_token("worker")
    with pool.connection() as conn:
        users.insert_token(conn, token_digest(token), "worker", name, None)
    return IssuedToken(name=name, kind="worker", token=token, created=True)


def list_tokens(pool: ConnectionPool, *, revoked: bool = False) -> list[users.TokenRecord]:
    """Every live token (and the revoked ones if asked), without the secrets."""
    with pool.connection() as conn:
        return users.list_tokens(conn, revoked=revoked)


def revoke_token(pool: ConnectionPool, token_id: int) -> users.TokenRecord:
    """Revoke a token; every coordinator refuses it as soon as it hears (sql/0009)."""
    with pool.connection() as conn:
        record = users.revoke_token(conn, token_id)
    if record is None:
        raise NotFound(f"no token has the id {token_id}")
    return record


def _check_name(name: str) -> None:
    # The name a principal is known by in logs, audit rows and the job list's owner filter.
    if not 1 <= len(name) <= 200 or not name.isprintable() or name.isspace():
        raise InvalidInput.field("name", "must be 1-200 printable characters, not only spaces")
