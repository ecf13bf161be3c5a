"""Operator views and actions: the queue, its workloads and the workers."""

from __future__ import annotations

from flask import Blueprint

from app import auth, input_rules
from app.auth import current_principal
from app.runtime import get_runtime
from app.schemas import queue as queue_schemas
from app.tracing import current_trace_id
from services import queue, workload_registry

bp = Blueprint("queue", __name__, url_prefix="/api/v1")
bp.before_request(auth.operators_only)

# Built once: building a schema deep-copies every field it declares.
QUEUE = queue_schemas.QueueSchema()
WORKLOAD = queue_schemas.WorkloadSchema()
WORKLOAD_LIST = queue_schemas.WorkloadListSchema()
WORKLOAD_ADD = queue_schemas.WorkloadAddSchema()
WORKLOAD_CHANGE = queue_schemas.WorkloadChangeSchema()
WORKER_LIST = queue_schemas.WorkerListSchema()


@bp.get("/queue")
def queue_status():
    """Chunks by state and workload, oldest pending age, active leases against the caps."""
    return QUEUE.dump(queue.queue_status(get_runtime()))


@bp.get("/workloads")
def list_workloads():
    """Every served workload with its caps, and whether an operator paused it."""
    return WORKLOAD_LIST.dump({"workloads": queue.list_workloads(get_runtime())})


@bp.post("/workloads")
def add_workload():
    """Serve a new workload on every coordinator: the caps given, the settings' for the rest."""
    body = input_rules.load_json(WORKLOAD_ADD)
    name = body.pop("name")
    view = workload_registry.add_workload(
        get_runtime(), current_principal(), name, body, trace_id=current_trace_id()
    )
    return WORKLOAD.dump(view), 201


@bp.get("/workloads/<workload>")
def get_workload(workload: str):
    """One served workload with its caps, and whether an operator paused it."""
    return WORKLOAD.dump(
        workload_registry.get_workload(get_runtime(), current_principal(), workload)
    )


@bp.patch("/workloads/<workload>")
def change_workload(workload: str):
    """Change the caps given on every coordinator within a second; the others stay."""
    changes = input_rules.load_json(WORKLOAD_CHANGE)
    view = workload_registry.change_workload(
        get_runtime(), current_principal(), workload, changes, trace_id=current_trace_id()
    )
    return WORKLOAD.dump(view)


@bp.delete("/workloads/<workload>")
def remove_workload(workload: str):
    """Stop serving a workload everywhere (409 while it has unfinished jobs)."""
    workload_registry.remove_workload(
        get_runtime(), current_principal(), workload, trace_id=current_trace_id()
    )
    return "", 204


@bp.post("/workloads/<workload>/pause")
def pause_workload(workload: str):
    """Pause a workload: claims lease none of its tasks until it is resumed."""
    return _set_paused(workload, paused=True)


@bp.post("/workloads/<workload>/resume")
def resume_workload(workload: str):
    """Resume a workload: its pending tasks are claimable again, waiting claims woken."""
    return _set_paused(workload, paused=False)


@bp.get("/workers")
def list_workers():
    """Each worker's last heartbeat, leases held, chunks done and peak memory."""
    return WORKER_LIST.dump({"workers": queue.list_workers(get_runtime())})


def _set_paused(workload: str, *, paused: bool):
    view = queue.pause_workload(
        get_runtime(), current_principal(), workload, paused=paused, trace_id=current_trace_id()
    )
    return WORKLOAD.dump(view)
