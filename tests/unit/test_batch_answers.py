"""A batch's answers, built as JSON without marshmallow, are what their schemas would dump."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import pytest
from flask import Flask

from app import errors
from app.blueprints.tasks import claimed_of
from app.schemas import tasks as task_schemas
from repositories.tasks import ClaimedTask, Task
from services.csvjobs import WORKLOAD as CSV_WORKLOAD
from services.errors import InvalidInput, LeaseLost, NotFound
from services.tasks import CompletionOutcome, RenewalOutcome

EXPIRES = datetime(2026, 12, 5, 20, 30, 1, 250000, tzinfo=UTC)
REFUSALS = [
    LeaseLost("not your lease", code="lease_lost", details={"attempt": 2}),
    InvalidInput.field("result_sha256", "must be 64 lowercase hex digits"),
    NotFound("task does not exist"),
]


@pytest.fixture(autouse=True)
def request_context():
    # A fenced refusal is counted under the request's endpoint.
    with Flask(__name__).test_request_context("/api/v1/tasks/heartbeats"):
        yield


def test_a_renewed_heartbeat_is_what_its_schema_dumps() -> None:
    task_id = uuid4()
    answer = errors.renewal_of(RenewalOutcome(task_id, lease_expires_at=EXPIRES))
    expected = task_schemas.RenewalOutcomeSchema().dump(
        {
            "task_id": task_id,
            "outcome": "renewed",
            "status": 200,
            "lease_expires_at": EXPIRES,
            "error": None,
        }
    )
    assert list(answer.items()) == list(expected.items())


@pytest.mark.parametrize("refusal", REFUSALS, ids=lambda e: type(e).__name__)
def test_a_refused_heartbeat_is_what_its_schema_dumps(refusal) -> None:
    task_id = uuid4()
    answer = errors.renewal_of(RenewalOutcome(task_id, error=refusal))
    expected = task_schemas.RenewalOutcomeSchema().dump(
        {
            "task_id": task_id,
            "outcome": "rejected",
            "status": answer["status"],
            "lease_expires_at": None,
            "error": {"code": refusal.code, "message": refusal.message, "details": refusal.details},
        }
    )
    assert list(answer.items()) == list(expected.items())
    assert answer["status"] in (404, 409, 422)


@pytest.mark.parametrize("replayed", [False, True])
def test_an_accepted_or_replayed_result_is_what_its_schema_dumps(replayed: bool) -> None:
    task_id = uuid4()
    answer = errors.outcome_of(CompletionOutcome(task_id, task=object(), replayed=replayed))
    expected = task_schemas.ResultOutcomeSchema().dump(
        {
            "task_id": task_id,
            "outcome": "replayed" if replayed else "accepted",
            "status": 200,
            "error": None,
        }
    )
    assert list(answer.items()) == list(expected.items())


@pytest.mark.parametrize("refusal", REFUSALS, ids=lambda e: type(e).__name__)
def test_a_refused_result_is_what_its_schema_dumps(refusal) -> None:
    task_id = uuid4()
    answer = errors.outcome_of(CompletionOutcome(task_id, error=refusal))
    expected = task_schemas.ResultOutcomeSchema().dump(
        {
            "task_id": task_id,
            "outcome": "rejected",
            "status": answer["status"],
            "error": {"code": refusal.code, "message": refusal.message, "details": refusal.details},
        }
    )
    assert list(answer.items()) == list(expected.items())


def leased_task(workload: str, **fields: object) -> ClaimedTask:
    """A task as a claim leases it, with every field the answer reads set."""
    row = {
        "id": uuid4(),
        "job_id": uuid4(),
        "chunk_index": 3,
        "workload": workload,
        "priority": 0,
        "input_uri": "s3://in/3",
        "input_sha256": "a" * 64,
        "parameters": {"n": 3, "byte_start": 10, "byte_end": 20},
        "status": "leased",
        "attempt": 2,
        "max_attempts": 3,
        "lost_retries": 0,
        "read_retries": 0,
        "lease_owner": "worker-a",
        "lease_expires_at": EXPIRES,
        "heartbeat_at": None,
        "checkpoint": None,
        "result_uri": None,
        "result_sha256": None,
        "metrics": None,
        "error_code": None,
        "error_message": None,
        "error_details": None,
        "created_at": EXPIRES,
        "started_at": EXPIRES,
        "completed_at": None,
        "version": 4,
        **fields,
    }
    return ClaimedTask(Task(**row), uuid4(), "f" * 32, "cwl_" + "t" * 43)


@pytest.mark.parametrize(
    "claimed",
    [
        leased_task("echo"),
        leased_task(CSV_WORKLOAD, checkpoint={"records_done": 5}),
        leased_task("echo", deadline=EXPIRES, args='{"x":1}', parameters={}),
    ],
    ids=["manifest", "csv-chunk-with-checkpoint", "args-and-deadline"],
)
def test_a_leased_task_is_what_the_claims_schema_dumps(claimed: ClaimedTask) -> None:
    answer = {
        "tasks": [claimed_of(claimed, 30, 1024)],
        "heartbeat_seconds": 30,
        "max_result_bytes": 1024,
    }
    expected = task_schemas.ClaimResponseSchema().dump(
        {"tasks": [claimed], "heartbeat_seconds": 30, "max_result_bytes": 1024}
    )
    assert list(answer.items()) == list(expected.items())
    assert list(answer["tasks"][0].items()) == list(expected["tasks"][0].items())
