"""Bearer tokens: hashing them, and resolving them to a principal."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from psycopg_pool import ConnectionPool

from repositories import users
from services.errors import Unauthenticated

USER_PREFIX = "cwu_"
WORKER_PREFIX = "cww_"


@dataclass(frozen=True)
class Principal:
    """Who is calling: a user (role user or operator) or a worker credential."""

    kind: str
    name: str
    user_id: int | None
    role: str
    # The api_tokens row the caller authenticated with: worker ids are bound to it (sql/0026).
    token_id: int | None = None

    @property
    def is_operator(self) -> bool:
        """Operators see every user's jobs and the queue views."""
        return self.role == "operator"

    @property
    def visible_owner(self) -> int | None:
        """The owner whose rows this caller may see: None, every owner's, for an operator."""
        return None if self.is_operator else self.user_id


def token_digest(token: str) -> str:
    """Return the hex SHA-256 under which a token is stored."""
    return hashlib.sha256(token.encode()).hexdigest()


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
    principal = principal_of_owner(owner)
    known.remember(digest, principal, generation)
    return principal


def principal_of_owner(owner: users.TokenOwner) -> Principal:
    """The principal a live token's owner calls as."""
    if owner.kind == "worker":
        return Principal(
            kind="worker", name=owner.name, user_id=None, role="worker", token_id=owner.token_id
        )
    return Principal(kind="user", name=owner.name, user_id=owner.user_id, role=owner.role)
