"""The worker protocol: claim, read input, heartbeat, report a result or a failure."""

from __future__ import annotations

from uuid import UUID

from flask import Blueprint, Response, request

from app import auth, errors, input_rules, schemas
from app.runtime import get_runtime
from services import tasks
from services.errors import WaitRefused

bp = Blueprint("tasks", __name__, url_prefix="/api/v1/tasks")
bp.before_request(auth.workers_only)

# Built once: building a schema deep-copies every field it declares.
CLAIM = schemas.ClaimSchema()
CLAIM_RESPONSE = schemas.ClaimResponseSchema()
LEASE = schemas.LeaseSchema()
LEASE_TOKEN_HEADER = schemas.LeaseTokenHeaderSchema()
HEARTBEAT = schemas.HeartbeatSchema()
LEASE_RENEWED = schemas.LeaseRenewedSchema()
HEARTBEAT_BATCH = schemas.HeartbeatBatchSchema()
RESULT = schemas.ResultSchema()
TASK = schemas.TaskSchema()
RESULT_BATCH = schemas.ResultBatchSchema()
FAILURE = schemas.FailureSchema()


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
    return CLAIM_RESPONSE.dump(
        {
            "tasks": claimed,
            "heartbeat_seconds": rt.limits.heartbeat_seconds,
            "max_result_bytes": rt.limits.max_result_bytes,
        }
    )


@bp.get("/<uuid:task_id>/input")
def read_input(task_id: UUID):
    """Stream a chunk's bytes, or the Range asked for (206), to the worker holding its lease."""
    query = LEASE.load(input_rules.single_values(request.args))
    # A header, never the query string: access logs keep URLs.
    header = request.headers.get(schemas.LEASE_TOKEN_HEADER)
    sent = {} if header is None else {schemas.LEASE_TOKEN_HEADER: header}
    token = LEASE_TOKEN_HEADER.load(sent)["lease_token"]
    call = tasks.LeaseCall(query["worker_id"], _credential_id(), query["attempt"], token)
    asked = input_rules.byte_range()
    served = tasks.serve_input(get_runtime(), task_id, call, byte_range=asked)
    headers = {"Content-Length": str(served.length), "Accept-Ranges": "bytes"}
    if asked is not None:
        last = served.first + served.length - 1
        headers["Content-Range"] = f"bytes {served.first}-{last}/{served.total}"
    return Response(
        served.blocks,
        status=200 if asked is None else 206,
        mimetype="application/octet-stream",
        headers=headers,
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
    """Complete many tasks in one transaction; each result is answered on its own."""
    body = input_rules.load_json(RESULT_BATCH)
    completions = [
        tasks.Completion(
            item.pop("task_id"),
            item.pop("attempt"),
            item.pop("lease_token"),
            tasks.TaskResult(**item),
        )
        for item in body["results"]
    ]
    outcomes = tasks.complete_tasks(get_runtime(), body["worker_id"], _credential_id(), completions)
    return {"results": [errors.outcome_of(o) for o in outcomes]}


@bp.post("/<uuid:task_id>/failure")
def failure(task_id: UUID):
    """Report a failure; retryable ones go back to the queue while budgets remain."""
    body = input_rules.load_json(FAILURE)
    lease = (body.pop("worker_id"), _credential_id(), body.pop("attempt"), body.pop("lease_token"))
    task = tasks.fail_task(get_runtime(), task_id, *lease, tasks.TaskFailure(**body))
    return TASK.dump(task)


def _credential_id() -> int:
    """The worker credential the request authenticated with: worker ids are bound to it."""
    return auth.current_principal().token_id
