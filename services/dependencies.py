"""Job dependencies: which jobs a new job may wait for, whether a retried one waits again and
which of the jobs its failure failed wait with it, and the jobs related to one. A finished job
tells its dependents in services/settlement.py."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from uuid import UUID

from psycopg import Connection

from repositories import jobs as job_rows
from repositories.jobs import Job
from services.auth import Principal
from services.errors import Conflict, InvalidInput
from services.runtime import Runtime

# The most jobs one job may wait for: a fan-in step, not a copy of the queue.
MAX_PREREQUISITES = 100


def check_ids(ids: Sequence[UUID]) -> None:
    """At most MAX_PREREQUISITES jobs, each named once."""
    if len(ids) > MAX_PREREQUISITES:
        raise InvalidInput.field("depends_on", f"at most {MAX_PREREQUISITES} jobs")
    seen: set[UUID] = set()
    twice = {}
    for index, job_id in enumerate(ids):
        if job_id in seen:
            twice[str(index)] = ["this job is named twice"]
        seen.add(job_id)
    if twice:
        raise InvalidInput(
            "depends_on: a job is named twice", details={"fields": {"depends_on": twice}}
        )


def waits_for(conn: Connection, principal: Principal, ids: Sequence[UUID]) -> bool:
    """Lock the jobs a new job depends on; whether any is yet to succeed. One the caller cannot
    see is bad input; one that failed or was cancelled, a conflict: the job could never run."""
    owner = principal.visible_owner
    found = {job.id: job for job in job_rows.lock_prerequisites(conn, ids, owner)}
    missing = {str(i): ["no job of yours has this id"] for i, j in enumerate(ids) if j not in found}
    if missing:
        raise InvalidInput(
            "depends_on: no job of yours has this id", details={"fields": {"depends_on": missing}}
        )
    for job in found.values():
        if job.status in ("failed", "cancelled"):
            raise Conflict(
                f"job {job.id} it would depend on is {job.status}; it could never run",
                code="dependency_failed",
                details={"job_id": str(job.id), "status": job.status},
            )
    return any(job.status != "succeeded" for job in found.values())


def still_waits(conn: Connection, job: Job) -> bool:
    """Whether a job being retried waits for any of the jobs it depends on; a conflict if one
    failed or was cancelled (retry that first). Read, not locked: the caller's turn orders
    this against their finishing."""
    statuses = job_rows.statuses(conn, job.depends_on or [])
    for prerequisite, status in statuses.items():
        if status in ("failed", "cancelled"):
            raise Conflict(
                f"job {prerequisite} it depends on is {status}; retry that first",
                code="dependency_failed",
                details={"job_id": str(prerequisite), "status": status},
            )
    return any(status != "succeeded" for status in statuses.values())


def downstream(
    conn: Connection,
    job_ids: Collection[UUID],
    dependents_of: Callable[[Connection, list[UUID]], list[UUID]] = job_rows.dependents,
) -> set[UUID]:
    """The jobs depending on any of these, and those depending on them in turn (as
    `dependents_of` finds a generation's): read, not locked."""
    found: set[UUID] = set()
    level = list(job_ids)
    while level:
        level = [i for i in dependents_of(conn, level) if i not in found]
        found.update(level)
    return found


def failed_with(conn: Connection, job: Job) -> list[Job]:
    """The jobs this failed job's failure failed, and theirs in turn, that may wait again now
    that it is retried: each locked, in the order they were created (as a failure locks them).
    One that also waits for another failed or cancelled job stays failed, as do those waiting
    for it; retrying that job brings them.

    They are locked before their prerequisites' statuses are read, in a statement of its own:
    a prerequisite failing at the same time has either failed them first (it locks each, see
    services/settlement.py) and is read failed here, or waits for them and fails them again.
    """
    found = downstream(conn, [job.id], job_rows.failed_dependents)
    waiting = {
        j.id: j
        for j in job_rows.lock_many(conn, found)
        if j.status == "failed" and (j.error or {}).get("code") == "dependency_failed"
    }
    statuses = job_rows.statuses(conn, {p for j in waiting.values() for p in j.depends_on or []})

    def stuck(dependent: Job) -> bool:
        return any(
            p != job.id and p not in waiting and statuses.get(p) in ("failed", "cancelled")
            for p in dependent.depends_on or []
        )

    while dropped := [j for j in waiting.values() if stuck(j)]:
        for dependent in dropped:
            del waiting[dependent.id]
    return list(waiting.values())


@dataclass(frozen=True)
class RelatedJobs:
    """The jobs a job waits for and those waiting for it that the caller may see, by id,
    with their statuses, in id order."""

    depends_on: dict[UUID, str]
    needed_by: dict[UUID, str]


def related_jobs(rt: Runtime, principal: Principal, job: Job, *, limit: int) -> RelatedJobs:
    """The visible jobs a job depends on, and up to `limit` of those depending on it."""
    owner = principal.visible_owner
    with rt.pool.connection() as conn:
        needed_by = job_rows.dependents(conn, [job.id], limit=limit)
        known = job_rows.statuses(conn, [*(job.depends_on or []), *needed_by], owner)
    return RelatedJobs(
        depends_on={i: known[i] for i in sorted(job.depends_on or []) if i in known},
        needed_by={i: known[i] for i in needed_by if i in known},
    )
