"""The worker protocol: claim, read input, heartbeat, report a result or a failure."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from flask import Blueprint, Response, request
from marshmallow import ValidationError
from werkzeug.wsgi import wrap_file

from app import auth, errors, input_rules
from app.runtime import get_runtime
from app.schemas import tasks as task_schemas
from services import tasks
from services.csvjobs import WORKLOAD as CSV_WORKLOAD
from services.errors import WaitRefused
from services.runtime import Runtime

bp = Blueprint("tasks", __name__, url_prefix="/api/v1/tasks")
bp.before_request(auth.workers_only)

# Built once: building a schema deep-copies every field it declares.
CLAIM = task_schemas.ClaimSchema()
LEASE = task_schemas.LeaseSchema()
LEASE_TOKEN_HEADER = task_schemas.LeaseTokenHeaderSchema()
HEARTBEAT = task_schemas.HeartbeatSchema()
LEASE_RENEWED = task_schemas.LeaseRenewedSchema()
HEARTBEAT_BATCH = task_schemas.HeartbeatBatchSchema()
RESULT = task_schemas.ResultSchema()
TASK = task_schemas.TaskSchema()
RESULT_BATCH = task_schemas.ResultBatchSchema()
RESULT_BATCH_QUERY = task_schemas.ResultBatchQuerySchema()
FAILURE = task_schemas.FailureSchema()


@bp.post("/claim")
def claim():
    """Lease up to `capacity` tasks, long-polling up to `wait_seconds`; 204 when none.

    204 with Retry-After, at once, when none is free and the process has no waiting place.
    """
    body = input_rules.load_json(CLAIM)
    rt = get_runtime()
    try:
        claimed = tasks.claim_tasks(rt, **body, credential_id=_credential_id())
    except WaitRefused as refused:
        return Response(status=204, headers={"Retry-After": str(refused.retry_after)})
    if not claimed:
        return Response(status=204)
    return _leased(rt, claimed)


@bp.get("/<uuid:task_id>/input")
def read_input(task_id: UUID):
    """Stream a chunk's bytes, or the Range asked for (206), to the worker holding its lease."""
    query = LEASE.load(input_rules.single_values(request.args))
    # A header, never the query string: access logs keep URLs.
    header = request.headers.get(task_schemas.LEASE_TOKEN_HEADER)
    sent = {} if header is None else {task_schemas.LEASE_TOKEN_HEADER: header}
    token = LEASE_TOKEN_HEADER.load(sent)["lease_token"]
    call = tasks.LeaseCall(query["worker_id"], _credential_id(), query["attempt"], token)
    asked = input_rules.byte_range()
    served = tasks.serve_input(get_runtime(), task_id, call, byte_range=asked)
    headers = {"Content-Length": str(served.length), "Accept-Ranges": "bytes"}
    if asked is not None:
        last = served.first + served.length - 1
        headers["Content-Range"] = f"bytes {served.first}-{last}/{served.total}"
    # The server's file wrapper: gunicorn sends a file's range by sendfile, with no copy
    # through this process; elsewhere (or from the object store) it reads it in blocks.
    return Response(
        wrap_file(request.environ, served.file, tasks.READ_BLOCK),
        status=200 if asked is None else 206,
        mimetype="application/octet-stream",
        headers=headers,
        direct_passthrough=True,
    )


@bp.post("/<uuid:task_id>/heartbeat")
def heartbeat(task_id: UUID):
    """Extend the lease; 409 when it is no longer this worker's."""
    body = input_rules.load_json(HEARTBEAT)
    expires = tasks.renew_lease(get_runtime(), task_id, credential_id=_credential_id(), **body)
    return LEASE_RENEWED.dump({"lease_expires_at": expires})


@bp.post("/heartbeats")
def heartbeats():
    """Extend many leases in one transaction; each heartbeat is answered on its own."""
    body = input_rules.load_json(HEARTBEAT_BATCH)
    renewals = [tasks.Renewal(**item) for item in body["heartbeats"]]
    outcomes = tasks.renew_leases(get_runtime(), body["worker_id"], _credential_id(), renewals)
    # Built as JSON by errors.renewal_of: a marshmallow dump of a hundred outcomes cost more
    # than the statement renewing them.
    return {"results": [errors.renewal_of(o) for o in outcomes]}


@bp.post("/<uuid:task_id>/result")
def result(task_id: UUID):
    """Complete the task under the caller's attempt (idempotent for the same result)."""
    body = input_rules.load_json(RESULT)
    lease = (body.pop("worker_id"), _credential_id(), body.pop("attempt"), body.pop("lease_token"))
    task = tasks.complete_task(get_runtime(), task_id, *lease, tasks.TaskResult(**body))
    return TASK.dump(task)


@bp.post("/results")
def results():
    """Complete many tasks in one transaction, each answered on its own; ?claim=N: lease N more.

    The claim runs after the results' transaction, as a claim with capacity N and no wait.
    """
    wanted = RESULT_BATCH_QUERY.load(input_rules.single_values(request.args))["claim"]
    body = input_rules.load_json(RESULT_BATCH, task_schemas.plain_result_batch)
    workloads = body.pop("workloads", None)
    if (wanted is None) != (workloads is None):
        needs = "required with ?claim" if wanted is not None else "given only with ?claim"
        raise ValidationError({"workloads": [needs]})
    completions = [
        tasks.Completion(
            item.pop("task_id"),
            item.pop("attempt"),
            item.pop("lease_token"),
            tasks.TaskResult(**item),
        )
        for item in body["results"]
    ]
    rt, caller = get_runtime(), (body["worker_id"], _credential_id())
    if wanted is None:
        outcomes = tasks.complete_tasks(rt, *caller, completions)
        return {"results": [errors.outcome_of(o) for o in outcomes]}
    done = tasks.complete_and_claim(rt, *caller, completions, workloads, wanted)
    refusal = done.claim_error
    return {
        "results": [errors.outcome_of(o) for o in done.outcomes],
        **_leased(rt, done.claimed),
        "claim_error": None if refusal is None else errors.error_body(refusal),
    }


@bp.post("/<uuid:task_id>/failure")
def failure(task_id: UUID):
    """Report a failure; retryable ones go back to the queue while budgets remain."""
    body = input_rules.load_json(FAILURE)
    lease = (body.pop("worker_id"), _credential_id(), body.pop("attempt"), body.pop("lease_token"))
    task = tasks.fail_task(get_runtime(), task_id, *lease, tasks.TaskFailure(**body))
    return TASK.dump(task)


def _leased(rt: Runtime, claimed: list[tasks.ClaimedTask]) -> dict:
    """A claim's answer as ClaimResponseSchema dumps it, built as JSON directly."""
    # A marshmallow dump of a hundred tasks cost more CPU than the claim's statement;
    # tests/unit/test_batch_answers.py holds this to the schema.
    beat, most = rt.limits.heartbeat_seconds, rt.limits.max_result_bytes
    return {
        "tasks": [claimed_of(c, beat, most) for c in claimed],
        "heartbeat_seconds": beat,
        "max_result_bytes": most,
    }


def claimed_of(claimed: tasks.ClaimedTask, heartbeat_seconds: int, max_result_bytes: int) -> dict:
    """One leased task as ClaimedTaskSchema dumps it, in its field order."""
    task = claimed.task
    parameters = dict(task.parameters)
    if task.workload == CSV_WORKLOAD:
        # A chunk's byte range is the coordinator's business: its input URI serves it.
        parameters.pop("byte_start", None)
        parameters.pop("byte_end", None)
    return {
        "task_id": str(task.id),
        "job_id": str(task.job_id),
        "chunk_index": task.chunk_index,
        "attempt": task.attempt,
        "attempt_id": str(claimed.attempt_id),
        "trace_id": claimed.trace_id,
        "lease_token": claimed.lease_token,
        "workload": task.workload,
        "input_uri": task.input_uri,
        "input_sha256": task.input_sha256,
        "parameters": parameters,
        "checkpoint": None if task.checkpoint is None else dict(task.checkpoint),
        "lease_expires_at": _iso(task.lease_expires_at),
        "deadline": _iso(task.deadline),
        "args": task.args,
        "heartbeat_seconds": heartbeat_seconds,
        "max_result_bytes": max_result_bytes,
    }


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _credential_id() -> int:
    """The worker credential the request authenticated with: worker ids are bound to it."""
    return auth.current_principal().token_id
