"""A batch's answers, built as JSON without marshmallow, are what their schemas would dump."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import pytest
from flask import Flask

from app import errors, schemas
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
    expected = schemas.RenewalOutcomeSchema().dump(
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
    expected = schemas.RenewalOutcomeSchema().dump(
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
    expected = schemas.ResultOutcomeSchema().dump(
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
    expected = schemas.ResultOutcomeSchema().dump(
        {
            "task_id": task_id,
            "outcome": "rejected",
            "status": answer["status"],
            "error": {"code": refusal.code, "message": refusal.message, "details": refusal.details},
        }
    )
    assert list(answer.items()) == list(expected.items())
