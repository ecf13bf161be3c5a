"""Adding, changing and removing served workloads at run time, and seeding them from settings.

The workloads table (sql/0031) holds what every coordinator serves; each one's listener
reloads it when a row changes (services/wakeups), so a change holds everywhere within a second.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import asdict, replace

import psycopg
from psycopg import Connection
from psycopg_pool import ConnectionPool

from repositories import events as event_rows
from repositories import queue as queue_rows
from repositories import tasks as task_rows
from repositories import workload_registry as workload_rows
from repositories.workload_registry import StoredWorkload
from services import csvjobs, csvstats
from services.auth import Principal
from services.csvjobs import CsvStats
from services.errors import Conflict, Forbidden, InvalidInput, NotFound
from services.queue import WorkloadView
from services.runtime import Limits, Runtime
from services.workloads import NAME, NAME_RULE, Caps, Workloads

logger = logging.getLogger(__name__)

# The workloads whose rules are their own rather than manifest jobs'.
KINDS = {csvjobs.WORKLOAD: CsvStats}


def seed_caps(limits: Limits) -> dict[str, Caps]:
    """What the settings say each allowed workload's caps are: csv_stats's own, the manifest
    defaults for every other, and the rates CHUNKWISE_WORKLOAD_RATE_LIMITS gives."""
    rates = dict(limits.rate_limits)
    share = limits.user_max_queued_percent
    csv_caps = Caps(
        max_leases_per_worker=limits.max_leases_per_worker,
        max_leases_total=limits.max_leases_total,
        max_queued_tasks=limits.max_queued_chunks,
        # Never more than its queue holds, or every later change of its caps is refused.
        max_tasks_per_job=min(csvstats.MAX_CHUNKS, limits.max_queued_chunks),
        max_starts_per_second=rates.get(csvjobs.WORKLOAD),
        max_queued_tasks_per_user=max(1, limits.max_queued_chunks * share // 100),
        max_stored_bytes_per_user=limits.user_max_stored_bytes,
    )
    caps = {csvjobs.WORKLOAD: csv_caps}
    for name in limits.allowed_workloads:
        base = manifest_caps(limits, limits.manifest_max_queued_tasks)
        caps.setdefault(name, replace(base, max_starts_per_second=rates.get(name)))
    return caps


def manifest_caps(limits: Limits, max_queued_tasks: int) -> Caps:
    """The settings' caps for a manifest workload whose queue holds so many tasks."""
    return Caps(
        max_leases_per_worker=limits.manifest_max_leases_per_worker,
        max_leases_total=limits.manifest_max_leases_total,
        max_queued_tasks=max_queued_tasks,
        max_tasks_per_job=min(limits.manifest_max_tasks_per_job, max_queued_tasks),
        max_queued_tasks_per_user=max(1, max_queued_tasks * limits.user_max_queued_percent // 100),
        max_stored_bytes_per_user=limits.user_max_stored_bytes,
    )


def refresh(
    pool: ConnectionPool,
    workloads: Workloads,
    seeds: Mapping[str, Caps] | None,
    *,
    timeout: float | None = None,
) -> None:
    """Store the settings' caps for workloads no operator touched (if given), then serve
    exactly what the workloads table holds (waiting at most `timeout` for a connection)."""
    with pool.connection(timeout=timeout) as conn:
        if seeds:
            with conn.transaction():
                for name, caps in seeds.items():
                    workload_rows.seed(conn, name, asdict(caps))
        workloads.load_latest(lambda: {w.name: Caps(**w.caps) for w in workload_rows.served(conn)})


class Reloader:
    """Serves what the workloads table holds, seeding it from the settings first, once per
    process: at start or, if the database did not answer then, at the first reload that
    reaches it. Only once: coordinators whose settings differ would otherwise reseed after
    each other's seeds without end."""

    def __init__(self, pool: ConnectionPool, workloads: Workloads, seeds: Mapping[str, Caps]):
        self._pool = pool
        self._workloads = workloads
        self._seeds = seeds
        self._seeded = threading.Event()

    def reload(self, *, timeout: float | None = None) -> None:
        """Read the table (seeding it first if this process has not yet) and serve it."""
        seeds = None if self._seeded.is_set() else self._seeds
        refresh(self._pool, self._workloads, seeds, timeout=timeout)
        self._seeded.set()


def get_workload(rt: Runtime, principal: Principal, name: str) -> WorkloadView:
    """One served workload with its caps and pause."""
    _operators_only(principal)
    with rt.pool.connection() as conn:
        stored = workload_rows.get(conn, name)
        if stored is None:
            raise NotFound(f"workload {name} is not served")
        return _view(stored, conn)


def add_workload(
    rt: Runtime, principal: Principal, name: str, caps: Mapping[str, object], *, trace_id: str
) -> WorkloadView:
    """Serve a new workload on every coordinator: the caps given, the settings' for the rest."""
    _operators_only(principal)
    if name in KINDS:
        raise Conflict(f"workload {name} is built in", details={"field": "name"})
    if not NAME.fullmatch(name):
        raise InvalidInput.field("name", f"must be {NAME_RULE}")
    queued = caps.get("max_queued_tasks", rt.limits.manifest_max_queued_tasks)
    new_caps = _checked(replace(manifest_caps(rt.limits, queued), **_known(caps)), name)
    with rt.pool.connection() as conn, conn.transaction():
        stored = workload_rows.add(conn, name, asdict(new_caps), principal.name)
        if stored is None:
            raise Conflict(f"workload {name} is already served", details={"field": "name"})
        _audit(conn, principal, "workload.add", stored, trace_id)
        view = _view(stored, conn)
    _reload(rt)
    logger.info("workload added", extra={"event": "workload_added", "workload": name})
    return view


def change_workload(
    rt: Runtime, principal: Principal, name: str, changes: Mapping[str, object], *, trace_id: str
) -> WorkloadView:
    """Change some of a served workload's caps on every coordinator; the others stay."""
    _operators_only(principal)
    if not changes:
        raise InvalidInput("give at least one cap to change", details={"fields": {}})
    with rt.pool.connection() as conn, conn.transaction():
        stored = workload_rows.get(conn, name, for_update=True)
        if stored is None:
            raise NotFound(f"workload {name} is not served")
        new_caps = _checked(replace(Caps(**stored.caps), **_known(changes)), name)
        stored = workload_rows.change(conn, name, asdict(new_caps), principal.name)
        _audit(conn, principal, "workload.change", stored, trace_id)
        view = _view(stored, conn)
    _reload(rt)
    logger.info("workload changed", extra={"event": "workload_changed", "workload": name})
    return view


def remove_workload(rt: Runtime, principal: Principal, name: str, *, trace_id: str) -> None:
    """Stop serving a workload on every coordinator; refused while it has unfinished jobs."""
    _operators_only(principal)
    if name in KINDS:
        raise Conflict(f"workload {name} is built in and cannot be removed")
    with rt.pool.connection() as conn, conn.transaction():
        # Locked first: a concurrent change waits, and the count below is what is removed.
        if workload_rows.get(conn, name, for_update=True) is None:
            raise NotFound(f"workload {name} is not served")
        # Then its queue bound, which every admission of it takes: one that took it first has
        # committed by the count below, and one still to take it finds it deleted and, counting
        # again, this removal (services/jobs), on coordinators that still serve the workload too.
        task_rows.hold_queue_bound(conn, name)
        unfinished = workload_rows.unfinished_jobs(conn, name)
        if unfinished:
            raise Conflict(
                f"workload {name} has {unfinished} unfinished jobs; cancel them or let them "
                "finish first",
                code="workload_busy",
                details={"workload": name, "unfinished_jobs": unfinished},
            )
        workload_rows.remove(conn, name, principal.name)
        event_rows.audit(
            conn,
            actor=principal.name,
            action="workload.remove",
            target=name,
            details={},
            trace_id=trace_id,
        )
    _reload(rt)
    logger.info("workload removed", extra={"event": "workload_removed", "workload": name})


def _operators_only(principal: Principal) -> None:
    if not principal.is_operator:
        raise Forbidden("only operators add, change or remove workloads")


def _known(caps: Mapping[str, object]) -> Mapping[str, object]:
    """The caps, unless one is not a cap at all (InvalidInput naming it)."""
    unknown = sorted(set(caps) - set(workload_rows.CAP_COLUMNS))
    if unknown:
        raise InvalidInput(
            f"unknown caps: {', '.join(unknown)}",
            details={"fields": {name: ["Unknown field."] for name in unknown}},
        )
    return caps


def _checked(caps: Caps, name: str) -> Caps:
    """The caps, unless two of them contradict each other (InvalidInput naming the field)."""
    per_worker, total = caps.max_leases_per_worker, caps.max_leases_total
    if per_worker is not None and total is not None and per_worker > total:
        raise InvalidInput.field(
            "max_leases_per_worker", f"must not exceed max_leases_total ({total})"
        )
    if caps.max_tasks_per_job > caps.max_queued_tasks:
        raise InvalidInput.field(
            "max_tasks_per_job", f"must not exceed max_queued_tasks ({caps.max_queued_tasks})"
        )
    if name == csvjobs.WORKLOAD:
        # The queue's figures and /metrics report them as numbers (services/queue.py).
        lifted = [
            n for n in ("max_leases_per_worker", "max_leases_total") if getattr(caps, n) is None
        ]
        if lifted:
            raise InvalidInput.field(lifted[0], "csv_stats's lease caps may be changed, not lifted")
    if name == csvjobs.WORKLOAD and caps.max_tasks_per_job > csvstats.MAX_CHUNKS:
        raise InvalidInput.field(
            "max_tasks_per_job", f"a csv_stats job has at most {csvstats.MAX_CHUNKS} chunks"
        )
    return caps


def _reload(rt: Runtime) -> None:
    # This coordinator at once; the others when their listeners hear the table's NOTIFY.
    # The change has committed: failing to read it back here (a pool timeout) must not answer
    # 503 for it, and this coordinator's listener hears the same NOTIFY and reloads anyway.
    try:
        refresh(rt.pool, rt.workloads, seeds=None)
    except psycopg.Error:
        logger.exception(
            "could not reload the workloads after a change; the listener will",
            extra={"event": "workloads_reload_error"},
        )


def _audit(
    conn: Connection,
    principal: Principal,
    action: str,
    stored: StoredWorkload,
    trace_id: str,
) -> None:
    event_rows.audit(
        conn,
        actor=principal.name,
        action=action,
        target=stored.name,
        details=stored.caps,
        trace_id=trace_id,
    )


def _view(stored: StoredWorkload, conn: Connection) -> WorkloadView:
    pause = next((p for p in queue_rows.pauses(conn) if p.workload == stored.name), None)
    return WorkloadView(stored.name, Caps(**stored.caps), pause)
