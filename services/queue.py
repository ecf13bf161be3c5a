"""Operator views of the queue and its workers, and pausing a workload's claims."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from repositories import events as event_rows
from repositories import queue as queue_rows
from repositories import workers as worker_rows
from repositories.queue import QueueFigures, WorkloadPause
from repositories.workers import Worker
from services import csvjobs
from services.auth import Principal
from services.errors import Forbidden, NotFound
from services.runtime import Limits, Runtime
from services.workloads import Caps

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkloadView:
    """A served workload: its caps, and its pause if an operator paused it."""

    name: str
    caps: Caps
    pause: WorkloadPause | None

    @property
    def paused(self) -> bool:
        """Whether claims lease none of its tasks now."""
        return self.pause is not None


@dataclass(frozen=True)
class QueueView:
    """The queue's figures beside the limits they are held to, and the served workloads."""

    figures: QueueFigures
    limits: Limits
    workloads: list[WorkloadView]


def queue_status(rt: Runtime) -> QueueView:
    """Chunks by state and workload, oldest pending age, active leases against the caps."""
    with rt.pool.connection() as conn:
        figures = queue_rows.figures(conn)
    # csv_stats's caps as operators last set them, not as the settings seeded them.
    csv = rt.workloads.of(csvjobs.WORKLOAD).caps
    limits = replace(
        rt.limits,
        max_leases_per_worker=csv.max_leases_per_worker,
        max_leases_total=csv.max_leases_total,
        max_queued_chunks=csv.max_queued_tasks,
    )
    return QueueView(figures, limits, _workloads(rt, figures.paused))


@dataclass(frozen=True)
class WorkerView:
    """A worker as seen, beside the most leases it can hold."""

    worker: Worker
    lease_limit: int


def list_workers(rt: Runtime) -> list[WorkerView]:
    """Every worker seen: last heartbeat, leases held against its limit, chunks done, memory."""
    with rt.pool.connection() as conn:
        workers = worker_rows.list_workers(conn)
    return [WorkerView(w, _lease_limit(rt, w)) for w in workers]


def _lease_limit(rt: Runtime, worker: Worker) -> int:
    """The most leases the worker can hold: its capacity, within its workloads' per-worker caps
    (csv_stats's 2 by default; a workload without one leaves the capacity as the bound)."""
    caps = [rt.workloads.of(name).caps.max_leases_per_worker for name in worker.workloads]
    if not caps or None in caps:
        return worker.capacity
    return min(worker.capacity, sum(caps))


def list_workloads(rt: Runtime) -> list[WorkloadView]:
    """Every workload this coordinator serves, with its caps and whether it is paused."""
    with rt.pool.connection() as conn:
        return _workloads(rt, queue_rows.pauses(conn))


def _workloads(rt: Runtime, pauses: list[WorkloadPause]) -> list[WorkloadView]:
    by_workload = {p.workload: p for p in pauses}
    return [
        WorkloadView(name, rt.workloads.of(name).caps, by_workload.get(name))
        for name in rt.workloads.names()
    ]


def pause_workload(
    rt: Runtime, principal: Principal, name: str, *, paused: bool, trace_id: str
) -> WorkloadView:
    """Pause a workload (claims lease none of its tasks) or resume it, waking waiting claims."""
    if not principal.is_operator:
        raise Forbidden("only operators pause or resume a workload")
    rules = rt.workloads.get(name)
    if rules is None:
        raise NotFound(f"workload {name} is not served here")
    with rt.pool.connection() as conn, conn.transaction():
        if paused:
            pause = queue_rows.pause(conn, name, principal.name)
        else:
            pause = None
            queue_rows.resume(conn, name)
        event_rows.audit(
            conn,
            actor=principal.name,
            action="workload.pause" if paused else "workload.resume",
            target=name,
            details={},
            trace_id=trace_id,
        )
    logger.info(
        "workload paused" if paused else "workload resumed",
        extra={"event": "workload_paused" if paused else "workload_resumed", "workload": name},
    )
    return WorkloadView(name, rules.caps, pause)


def fold_tallies(rt: Runtime) -> None:
    """Fold the rows the queue's changes added to the tallies, so a read sums a few."""
    with rt.pool.connection() as conn:
        queue_rows.fold_tallies(conn)
