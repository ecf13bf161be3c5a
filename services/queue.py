"""Operator views of the queue and its workers."""

from __future__ import annotations

from dataclasses import dataclass

from repositories import queue as queue_rows
from repositories import workers as worker_rows
from repositories.queue import QueueFigures
from repositories.workers import Worker
from services.runtime import Limits, Runtime


@dataclass(frozen=True)
class QueueView:
    """The queue's figures beside the limits they are held to."""

    figures: QueueFigures
    limits: Limits


def queue_status(rt: Runtime) -> QueueView:
    """Chunks by state and workload, oldest pending age, active leases against the caps."""
    with rt.pool.connection() as conn:
        return QueueView(queue_rows.figures(conn), rt.limits)


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


def fold_tallies(rt: Runtime) -> None:
    """Fold the rows the queue's changes added to the tallies, so a read sums a few."""
    with rt.pool.connection() as conn:
        queue_rows.fold_tallies(conn)
