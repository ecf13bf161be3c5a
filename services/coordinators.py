"""Coordinators sharing one database: each checks in with a digest of every setting that must
agree across hosts, and one whose values differ from a live coordinator started before it
says so, in its log and at /readyz."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from repositories import coordinators as coordinator_rows
from repositories.coordinators import CoordinatorRow
from services.errors import Unavailable

if TYPE_CHECKING:  # services.runtime holds a Coordinator
    from services.runtime import Runtime

logger = logging.getLogger(__name__)

# A coordinator that has not checked in for this many maintenance passes (and a minute at
# least) is dead: its settings no longer count.
LIVE_PASSES = 3
MIN_LIVE_SECONDS = 60
# A dead coordinator's row is kept this long, so one that comes back after an outage keeps
# its start (which decides whose settings count first).
KEPT_SECONDS = 86_400
# The session key is digested slowly, salted by its purpose: the row must not let anyone who
# reads the database (or a backup) try guesses at a human-chosen key quickly.
SECRET_KEY_SETTING = "CHUNKWISE_SECRET_KEY"
KEY_DIGEST_ITERATIONS = 20_000


@dataclass(frozen=True)
class Coordinator:
    """This coordinator process, as the others on its database see it."""

    id: str
    host: str
    pid: int
    version: str
    setting_digests: Mapping[str, str]  # setting name -> digest of its value
    live_seconds: float
    # Set once its row is in: a clean stop then deletes it.
    checked_in: threading.Event = field(default_factory=threading.Event, compare=False)
    # Disagreements already logged, each logged once rather than at every pass.
    reported: set[tuple[str, tuple[str, ...]]] = field(default_factory=set, compare=False)

    @property
    def fingerprint(self) -> str:
        """One digest of every shared setting's value: equal if and only if they all agree."""
        lines = "".join(
            f"{name}={digest}\n" for name, digest in sorted(self.setting_digests.items())
        )
        return hashlib.sha256(lines.encode()).hexdigest()


@dataclass(frozen=True)
class Disagreement:
    """A live coordinator, started before this one, with other values for these settings."""

    coordinator_id: str
    host: str
    settings: tuple[str, ...]


def describe(
    *,
    id: str,
    host: str,
    pid: int,
    version: str,
    shared_settings: Mapping[str, str],
    secret_key: str,
    maintenance_seconds: float,
) -> Coordinator:
    """This process's coordinator: a digest of each shared setting (by its variable's name)."""
    digests = {
        name: hashlib.sha256(f"{name}={value}".encode()).hexdigest()
        for name, value in shared_settings.items()
    }
    digests[SECRET_KEY_SETTING] = hashlib.pbkdf2_hmac(
        "sha256",
        secret_key.encode(),
        f"chunkwise coordinators {SECRET_KEY_SETTING}".encode(),
        KEY_DIGEST_ITERATIONS,
    ).hex()
    return Coordinator(
        id=id,
        host=host,
        pid=pid,
        version=version,
        setting_digests=digests,
        live_seconds=max(MIN_LIVE_SECONDS, LIVE_PASSES * maintenance_seconds),
    )


def check_in(rt: Runtime) -> list[Disagreement]:
    """Record this coordinator as live (its first check-in registers it), forget long-dead
    ones, and log each live older coordinator whose shared settings differ; those."""
    me = rt.coordinator
    with rt.pool.connection() as conn, conn.transaction():
        coordinator_rows.check_in(
            conn,
            id=me.id,
            host=me.host,
            pid=me.pid,
            version=me.version,
            fingerprint=me.fingerprint,
            setting_digests=dict(me.setting_digests),
            live_seconds=me.live_seconds,
        )
        coordinator_rows.delete_expired(conn, KEPT_SECONDS)
        older = coordinator_rows.live_before(conn, me.id)
    me.checked_in.set()
    found = disagreements(me, older)
    for d in found:
        if (d.coordinator_id, d.settings) in me.reported:
            continue
        me.reported.add((d.coordinator_id, d.settings))
        logger.error(
            f"settings differ from coordinator {d.coordinator_id} on {d.host}, started earlier: "
            f"{', '.join(d.settings)}; this coordinator is not ready until they agree",
            extra={
                "event": "coordinator_settings_differ",
                "coordinator_id": d.coordinator_id,
                "host": d.host,
                "settings": list(d.settings),
            },
        )
    return found


def check_out(rt: Runtime) -> None:
    """Delete this coordinator's row, if it checked in: it is stopping."""
    me = rt.coordinator
    if not me.checked_in.is_set():
        return
    me.checked_in.clear()  # tried once: a second close (atexit's) finds the pool closed
    with rt.pool.connection(timeout=1.0) as conn:
        coordinator_rows.check_out(conn, me.id)


def require_agreement(rt: Runtime) -> None:
    """Raise Unavailable naming each shared setting whose value differs from a live
    coordinator's that started before this one."""
    me = rt.coordinator
    with rt.pool.connection(timeout=2.0) as conn:
        found = disagreements(me, coordinator_rows.live_before(conn, me.id))
    if not found:
        return
    settings = sorted({name for d in found for name in d.settings})
    raise Unavailable(
        f"settings differ from a coordinator started earlier on this database: "
        f"{', '.join(settings)} (every coordinator must share them)",
        code="settings_differ",
        details={
            "settings": settings,
            "coordinators": [
                {"id": d.coordinator_id, "host": d.host, "settings": list(d.settings)}
                for d in found
            ],
        },
    )


def disagreements(me: Coordinator, others: list[CoordinatorRow]) -> list[Disagreement]:
    """The coordinators among `others` whose digests differ from this one's, with which."""
    found = []
    for other in others:
        if other.fingerprint == me.fingerprint:
            continue
        names = set(me.setting_digests) | set(other.setting_digests)
        differ = tuple(
            sorted(n for n in names if me.setting_digests.get(n) != other.setting_digests.get(n))
        )
        found.append(Disagreement(other.id, other.host, differ))
    return found
