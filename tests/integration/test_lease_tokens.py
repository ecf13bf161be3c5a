"""Leases as capabilities: only a lease's token acts under it, and worker ids are bound to the
credential that first claimed under them (issue 37)."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from devstack.sample_csv import generate_csv
from services import credentials, tasks
from tests.integration.csv_worker import CsvWorker, submit
from tests.integration.manifests import OTHER_WORKER, WORKER, manifest, result_body

DATA = generate_csv(200, seed=3)
MALFORMED = "cwl_not-a-token"
ACTIONS = ["input", "heartbeat", "heartbeats", "result", "results", "failure"]


@pytest.fixture
def rogue(rt) -> dict:
    """Headers of a second worker credential, as `flask issue-worker-token rogue` makes one."""
    token = credentials.issue_worker_token(rt.pool, "rogue").token
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def state(db):
    """Everything a refused call must leave as it was: the task row, its attempts, the
    worker rows, the job."""

    def snapshot(task_id: str) -> dict:
        return {
            "task": db.execute("SELECT * FROM tasks WHERE id = %s", (task_id,)).fetchone(),
            "attempts": db.execute(
                "SELECT * FROM task_attempts WHERE task_id = %s ORDER BY attempt", (task_id,)
            ).fetchall(),
            "workers": db.execute("SELECT * FROM workers ORDER BY id").fetchall(),
            "jobs": db.execute("SELECT * FROM jobs ORDER BY id").fetchall(),
        }

    return snapshot


def call(client, headers: dict, action: str, leased: dict, **lease: object):
    """One call of `action` about `leased`, under the lease fields given (None: left out)."""
    fields = {"worker_id": WORKER, "attempt": leased["attempt"], **lease}
    fields = {k: v for k, v in fields.items() if v is not None}
    task_id = leased["task_id"]
    if action == "input":
        token = fields.pop("lease_token", None)
        extra = {} if token is None else {"Chunkwise-Lease-Token": token}
        return client.get(
            f"/api/v1/tasks/{task_id}/input", query_string=fields, headers={**headers, **extra}
        )
    if action == "result":
        body = {**result_body(leased), **fields}
        if "lease_token" not in fields:
            del body["lease_token"]
    elif action == "failure":
        body = {**fields, "error_code": "boom", "retryable": False}
    elif action == "heartbeat":
        body = {**fields, "checkpoint": {"planted": True}}
    else:
        worker_id = fields.pop("worker_id")
        item = {"task_id": task_id, **fields}
        if action == "results":
            item = {**result_body(leased), **item}
            item.pop("worker_id")
            if "lease_token" not in fields:
                del item["lease_token"]
        body = {"worker_id": worker_id, action: [item]}
    path = (
        f"/api/v1/tasks/{action}" if action.endswith("s") else f"/api/v1/tasks/{task_id}/{action}"
    )
    return client.post(path, json=body, headers=headers)


def refusal(response) -> tuple[int, dict]:
    """The status and error of a call, or of its batch's one item."""
    body = response.get_json()
    if response.status_code == 200 and "results" in body:
        (outcome,) = body["results"]
        return outcome["status"], outcome["error"]
    return response.status_code, body["error"]


def test_a_claim_hands_out_a_secret_lease_token_kept_only_as_its_digest(
    submit, claim, db, task_row
):
    submit(manifest(1))
    [leased] = claim(WORKER)

    token = leased["lease_token"]
    assert re.fullmatch(r"cwl_[0-9a-f]{64}", token)
    digest = hashlib.sha256(token.encode()).hexdigest()
    assert task_row(leased["task_id"])["lease_sha256"] == digest
    stored = json.dumps(
        db.execute(
            "SELECT t.*, a.* FROM tasks t JOIN task_attempts a ON a.task_id = t.id"
        ).fetchall(),
        default=str,
    )
    assert token not in stored
    submit(manifest(1))
    [other] = claim(WORKER)
    assert other["lease_token"] != token


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("token", [None, MALFORMED], ids=["missing", "malformed"])
def test_a_call_without_a_well_formed_lease_token_is_422_naming_it_and_writes_nothing(
    action, token, submit, claim, client, headers, state
):
    submit(manifest(1))
    [leased] = claim(WORKER)
    before = state(leased["task_id"])

    response = call(client, headers["worker"], action, leased, lease_token=token)

    assert response.status_code == 422, response.get_json()
    named = "Chunkwise-Lease-Token" if action == "input" else "lease_token"
    assert named in json.dumps(response.get_json()["error"]["details"])
    assert state(leased["task_id"]) == before


@pytest.mark.parametrize("action", ACTIONS)
def test_another_leases_token_is_refused_as_not_the_callers_lease_and_writes_nothing(
    action, submit, claim, client, headers, state
):
    submit(manifest(2))
    leased, other = claim(WORKER, capacity=2)
    before = state(leased["task_id"])

    response = call(client, headers["worker"], action, leased, lease_token=other["lease_token"])

    status, error = refusal(response)
    assert (status, error["code"]) == (409, "lease_lost")
    assert error["details"] == {"task_id": leased["task_id"]}
    assert state(leased["task_id"]) == before


@pytest.mark.parametrize(
    "app_config",
    [
        {},
        {
            "CHUNKWISE_MANIFEST_MAX_LEASES_PER_WORKER": "4",
            "CHUNKWISE_MANIFEST_MAX_LEASES_TOTAL": "8",
        },
    ],
    indirect=True,
    ids=["uncapped", "capped"],  # a capped claim takes its workload's turn in the same round trip
)
def test_a_worker_id_bound_to_another_credential_cannot_claim_and_writes_nothing(
    submit, claim, client, rogue, db
):
    submit(manifest(2))
    claim(WORKER)
    workers_before = db.execute("SELECT * FROM workers").fetchall()

    response = client.post(
        "/api/v1/tasks/claim",
        json={"worker_id": WORKER, "workloads": ["echo"], "capacity": 5},
        headers=rogue,
    )

    assert response.status_code == 403
    error = response.get_json()["error"]
    assert error["code"] == "worker_id_taken"
    assert list(error["details"]["fields"]) == ["worker_id"]
    assert db.execute("SELECT * FROM workers").fetchall() == workers_before
    counts = db.execute("SELECT status, count(*) AS n FROM tasks GROUP BY status").fetchall()
    assert {r["status"]: r["n"] for r in counts} == {"leased": 1, "pending": 1}
    assert len(claim(WORKER)) == 1  # its own credential still claims, the refusal held nothing


def test_a_fresh_worker_id_is_bound_to_the_credential_that_first_claims_under_it(
    submit, claim, client, rogue, headers
):
    body = {"worker_id": "rogue-1", "workloads": ["echo"]}
    assert client.post("/api/v1/tasks/claim", json=body, headers=rogue).status_code == 204

    response = client.post("/api/v1/tasks/claim", json=body, headers=headers["worker"])

    assert response.status_code == 403
    assert response.get_json()["error"]["code"] == "worker_id_taken"


@pytest.mark.parametrize("action", ACTIONS)
def test_another_credential_under_the_victims_worker_id_is_refused_even_with_its_token(
    action, submit, claim, client, rogue, state
):
    # The token stolen too: the worker id's binding still refuses every call.
    submit(manifest(1))
    [leased] = claim(WORKER)
    before = state(leased["task_id"])

    response = call(client, rogue, action, leased, lease_token=leased["lease_token"])

    status, error = refusal(response)
    assert (status, error["code"]) == (403, "worker_id_taken")
    assert state(leased["task_id"]) == before


def test_a_non_holder_hears_no_attempt_or_status_while_the_holder_hears_why(
    rt, submit, claim, task_call
):
    submit(manifest(1))
    [first] = claim(WORKER)
    tasks.expire_leases(rt, now=datetime.now(UTC) + timedelta(minutes=5))
    [second] = claim(OTHER_WORKER)
    beat = {"worker_id": WORKER, "attempt": 1}

    holder = task_call(first["task_id"], "heartbeat", {**beat, "lease_token": first["lease_token"]})
    stranger = task_call(
        first["task_id"], "heartbeat", {**beat, "lease_token": second["lease_token"]}
    )

    assert holder.status_code == stranger.status_code == 409
    assert holder.get_json()["error"]["code"] == "stale_attempt"
    assert holder.get_json()["error"]["details"]["current_attempt"] == 2
    assert stranger.get_json()["error"]["code"] == "lease_lost"
    assert stranger.get_json()["error"]["details"] == {"task_id": first["task_id"]}


def test_a_replayed_result_is_answered_only_to_its_lease_token(submit, claim, task_call, task_row):
    submit(manifest(2))
    leased, other = claim(WORKER, capacity=2)
    body = result_body(leased)
    assert task_call(leased["task_id"], "result", body).status_code == 200
    accepted = task_row(leased["task_id"])

    replay = task_call(leased["task_id"], "result", body)
    foreign = task_call(leased["task_id"], "result", {**body, "lease_token": other["lease_token"]})

    assert replay.status_code == 200
    assert replay.get_json()["status"] == "completed"
    assert foreign.status_code == 409
    assert foreign.get_json()["error"] == {
        "code": "lease_lost",
        "message": "the caller does not hold this task's lease",
        "details": {"task_id": leased["task_id"]},
    }
    assert task_row(leased["task_id"]) == accepted


def test_digest_mismatch_names_the_field_but_never_the_expected_digest(client, headers, worker):
    submit(client, headers["user"], DATA)
    task = worker.claim_one()
    summary = worker.summarise(task).to_dict()

    response = worker.report_result(task, {**summary, "digest": "0" * 64})

    assert response.status_code == 422
    error = response.get_json()["error"]
    assert error["code"] == "digest_mismatch"
    assert error["details"] == {"fields": {"summary.digest": ["does not match the chunk"]}}
    assert summary["digest"] not in response.get_data(as_text=True)


def test_a_forged_summary_from_a_non_holder_hears_only_that_the_lease_is_not_its(
    client, headers, worker, task_row
):
    submit(client, headers["user"], DATA)
    victim, decoy = worker.claim(capacity=2)
    summary = worker.summarise(victim).to_dict()
    before = task_row(victim["task_id"])
    thief = CsvWorker(client, headers["worker"], worker.worker_id)

    response = thief.report_result(
        {**victim, "lease_token": decoy["lease_token"]}, {**summary, "digest": "0" * 64}
    )

    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "lease_lost"
    assert task_row(victim["task_id"]) == before
