"""Operator views: the queue and the workers."""

from __future__ import annotations

from flask import Blueprint

from app import auth, schemas
from app.runtime import get_runtime
from services import queue

bp = Blueprint("queue", __name__, url_prefix="/api/v1")
bp.before_request(auth.operators_only)

# Built once: building a schema deep-copies every field it declares.
QUEUE = schemas.QueueSchema()
WORKER_LIST = schemas.WorkerListSchema()


@bp.get("/queue")
def queue_status():
    """Chunks by state and workload, oldest pending age, active leases against the caps."""
    return QUEUE.dump(queue.queue_status(get_runtime()))


@bp.get("/workers")
def list_workers():
    """Each worker's last heartbeat, leases held, chunks done and peak memory."""
    return WORKER_LIST.dump({"workers": queue.list_workers(get_runtime())})
