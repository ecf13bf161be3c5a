"""The worker protocol over HTTP: fencing, idempotent results, and the failure classes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services import tasks
from tests.integration.manifests import OTHER_WORKER, WORKER, manifest, result_body


def later() -> datetime:
    """A moment after every lease granted now has run out."""
    return datetime.now(UTC) + timedelta(minutes=5)


def lease_call(action: str, claimed: dict, worker_id: str, attempt: int) -> dict:
    """The body of a heartbeat, result or failure made under (worker_id, attempt)."""
    lease = {"worker_id": worker_id, "attempt": attempt, "lease_token": claimed["lease_token"]}
    if action == "result":
        return {**result_body(claimed, worker_id), **lease}
    if action == "failure":
        return {**lease, "error_code": "boom", "error_message": "it broke", "retryable": True}
    return {**lease, "checkpoint": {"rows": 10}}


def failure(claimed: dict, code: str, retryable: bool, worker_id: str = WORKER) -> dict:
    """A failure report for a claimed task under its own attempt."""
    return {
        "worker_id": worker_id,
        "attempt": claimed["attempt"],
        "lease_token": claimed["lease_token"],
        "error_code": code,
        "error_message": f"{code} happened",
        "retryable": retryable,
        "details": {"n": 1},
    }


@pytest.fixture
def history(db):
    """The attempt rows of a task, oldest first."""

    def rows(task_id: str) -> list[dict]:
        return db.execute(
            "SELECT * FROM task_attempts WHERE task_id = %s ORDER BY attempt", (task_id,)
        ).fetchall()

    return rows


# --- fencing ----------------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["heartbeat", "result", "failure"])
def test_a_worker_cannot_touch_a_task_leased_to_another_worker(
    action, submit, claim, task_call, task_row, history
):
    submit(manifest(1))
    [leased] = claim(WORKER)
    before, attempts_before = task_row(leased["task_id"]), history(leased["task_id"])

    response = task_call(
        leased["task_id"], action, lease_call(action, leased, OTHER_WORKER, leased["attempt"])
    )

    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "lease_lost"
    assert task_row(leased["task_id"]) == before
    assert history(leased["task_id"]) == attempts_before


@pytest.mark.parametrize("action", ["heartbeat", "result", "failure"])
def test_a_worker_cannot_touch_its_task_under_an_old_attempt(
    action, rt, submit, claim, task_call, task_row, history
):
    submit(manifest(1))
    [first] = claim(WORKER)
    tasks.expire_leases(rt, now=later())
    [second] = claim(WORKER)
    assert (second["task_id"], second["attempt"]) == (first["task_id"], 2)
    before, attempts_before = task_row(first["task_id"]), history(first["task_id"])

    response = task_call(first["task_id"], action, lease_call(action, first, WORKER, 1))

    assert response.status_code == 409
    body = response.get_json()["error"]
    assert body["code"] == "stale_attempt"
    assert body["message"] == "attempt 1 is stale; the task is at attempt 2"
    assert body["details"]["current_attempt"] == 2
    assert task_row(first["task_id"]) == before
    assert history(first["task_id"]) == attempts_before


@pytest.mark.parametrize("action", ["heartbeat", "result", "failure"])
def test_an_attempt_after_the_current_one_is_refused_as_not_the_callers_lease(
    action, submit, claim, task_call, task_row
):
    submit(manifest(1))
    [leased] = claim(WORKER)
    before = task_row(leased["task_id"])

    response = task_call(leased["task_id"], action, lease_call(action, leased, WORKER, 2))

    assert response.status_code == 409
    body = response.get_json()["error"]
    assert body["code"] == "lease_lost"
    assert body["details"] == {"task_id": leased["task_id"]}
    assert task_row(leased["task_id"]) == before


def test_the_lease_holder_renews_its_lease_and_stores_the_checkpoint(
    submit, claim, task_call, task_row
):
    submit(manifest(1))
    [leased] = claim(WORKER)
    expires_before = task_row(leased["task_id"])["lease_expires_at"]

    response = task_call(
        leased["task_id"],
        "heartbeat",
        {
            "worker_id": WORKER,
            "attempt": 1,
            "lease_token": leased["lease_token"],
            "checkpoint": {"rows": 10},
        },
    )

    assert response.status_code == 200
    row = task_row(leased["task_id"])
    assert row["lease_expires_at"] > expires_before
    assert row["checkpoint"] == {"rows": 10}
    assert response.get_json()["lease_expires_at"]


def test_a_heartbeat_for_a_missing_task_is_404(client, headers):
    response = client.post(
        "/api/v1/tasks/00000000-0000-0000-0000-000000000000/heartbeat",
        json={"worker_id": WORKER, "attempt": 1, "lease_token": "cwl_" + "0" * 64},
        headers=headers["worker"],
    )

    assert response.status_code == 404
    assert response.get_json()["error"]["code"] == "not_found"


# --- results ----------------------------------------------------------------------------------


def test_resubmitting_the_same_result_for_the_same_attempt_completes_the_task_once(
    submit, claim, task_call, task_row, history, db
):
    submit(manifest(2))
    [leased] = claim(WORKER)
    body = result_body(leased)

    first = task_call(leased["task_id"], "result", body)
    after_first = task_row(leased["task_id"])
    second = task_call(leased["task_id"], "result", body)

    assert (first.status_code, second.status_code) == (200, 200)
    assert first.get_json()["status"] == second.get_json()["status"] == "completed"
    assert second.get_json()["result_uri"] == body["result_uri"]
    assert task_row(leased["task_id"]) == after_first
    assert [a["outcome"] for a in history(leased["task_id"])] == ["completed"]
    completions = db.execute(
        "SELECT count(*) AS n FROM outbox WHERE event = 'chunk.completed'"
    ).fetchone()["n"]
    assert completions == 1
    assert (
        db.execute("SELECT tasks_done FROM workers WHERE id = %s", (WORKER,)).fetchone()[
            "tasks_done"
        ]
        == 1
    )


def test_the_same_bytes_under_another_uri_are_a_replay_that_keeps_the_first_uri(
    submit, claim, task_call, task_row
):
    submit(manifest(1))
    [leased] = claim(WORKER)
    body = result_body(leased)
    assert task_call(leased["task_id"], "result", body).status_code == 200

    again = task_call(leased["task_id"], "result", {**body, "result_uri": "s3://elsewhere/copy"})

    assert again.status_code == 200
    assert task_row(leased["task_id"])["result_uri"] == body["result_uri"]


def test_a_different_result_for_an_accepted_attempt_is_a_result_conflict(
    submit, claim, task_call, task_row
):
    submit(manifest(2))
    [leased] = claim(WORKER)
    assert task_call(leased["task_id"], "result", result_body(leased)).status_code == 200
    accepted = task_row(leased["task_id"])

    response = task_call(leased["task_id"], "result", result_body(leased, tag="other"))

    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "result_conflict"
    assert task_row(leased["task_id"]) == accepted


def test_a_result_without_a_manifest_is_422_naming_both_fields(submit, claim, task_call):
    submit(manifest(1))
    [leased] = claim(WORKER)

    lease = {"worker_id": WORKER, "attempt": 1, "lease_token": leased["lease_token"]}
    response = task_call(leased["task_id"], "result", lease)

    assert response.status_code == 422
    assert set(response.get_json()["error"]["details"]["fields"]) == {"result_uri", "result_sha256"}


def test_a_result_digest_with_a_trailing_newline_is_422_and_the_task_stays_leased(
    submit, claim, task_call, task_row
):
    submit(manifest(1))
    [leased] = claim(WORKER)
    body = {**result_body(leased), "result_sha256": "a" * 64 + "\n"}

    response = task_call(leased["task_id"], "result", body)

    assert response.status_code == 422
    assert response.get_json()["error"]["details"]["fields"] == {
        "result_sha256": ["must be 64 lowercase hex digits"]
    }
    assert task_row(leased["task_id"])["status"] == "leased"


# --- failure classes --------------------------------------------------------------------------


def test_a_retryable_failure_requeues_the_task_while_attempts_remain_then_fails_it(
    submit, claim, task_call, task_row, history
):
    job = submit(manifest(1, max_attempts=3))
    statuses = []
    for attempt in (1, 2, 3):
        [leased] = claim(WORKER)
        assert leased["attempt"] == attempt
        response = task_call(leased["task_id"], "failure", failure(leased, "timeout", True))
        assert response.status_code == 200
        statuses.append(response.get_json()["status"])

    assert statuses == ["pending", "pending", "failed"]
    assert claim(WORKER) == []
    row = task_row(leased["task_id"])
    assert (row["status"], row["error_code"], row["attempt"]) == ("failed", "timeout", 3)
    assert [a["outcome"] for a in history(leased["task_id"])] == ["retried", "retried", "failed"]
    assert leased["job_id"] == job["id"]


def test_input_unavailable_is_retried_at_most_twice_even_with_attempts_left(
    submit, claim, task_call, task_row
):
    assert tasks.READ_RETRY_BUDGET == 2
    submit(manifest(1, max_attempts=10))
    statuses = []
    for _ in range(3):
        [leased] = claim(WORKER)
        response = task_call(
            leased["task_id"], "failure", failure(leased, "input_unavailable", True)
        )
        statuses.append(response.get_json()["status"])

    assert statuses == ["pending", "pending", "failed"]
    row = task_row(leased["task_id"])
    assert (row["attempt"], row["read_retries"], row["error_code"]) == (3, 3, "input_unavailable")


def test_a_non_retryable_failure_fails_the_task_at_once(submit, claim, task_call, task_row):
    submit(manifest(1, max_attempts=5))
    [leased] = claim(WORKER)

    response = task_call(leased["task_id"], "failure", failure(leased, "bad_format", False))

    assert response.status_code == 200
    assert response.get_json()["status"] == "failed"
    row = task_row(leased["task_id"])
    assert (row["status"], row["attempt"], row["error_code"]) == ("failed", 1, "bad_format")
    assert row["error_details"] == {"n": 1}
    assert claim(WORKER) == []


def test_invalid_input_is_never_retried_even_when_reported_retryable(submit, claim, task_call):
    submit(manifest(1, max_attempts=5))
    [leased] = claim(WORKER)

    response = task_call(leased["task_id"], "failure", failure(leased, "invalid_input", True))

    assert response.get_json()["status"] == "failed"


def test_a_terminal_task_failure_fails_the_job_and_cancels_its_other_tasks(
    submit, claim, task_call, task_row, job_row, client, headers
):
    job = submit(manifest(4))
    [doomed, running] = claim(WORKER, capacity=2)

    task_call(doomed["task_id"], "failure", failure(doomed, "bad_format", False))

    failed = job_row(job["id"])
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == "attempts_exhausted"
    assert failed["error"]["details"]["error_code"] == "bad_format"
    assert failed["error"]["details"]["chunk_index"] == doomed["chunk_index"]
    view = client.get(f"/api/v1/jobs/{job['id']}", headers=headers["user"]).get_json()
    assert view["chunks_by_state"] == {
        "pending": 0,
        "leased": 0,
        "completed": 0,
        "failed": 1,
        "cancelled": 3,
    }
    assert view["error"]["code"] == "attempts_exhausted"
    assert claim(OTHER_WORKER) == []
    # The chunk that was still running hears about it on its next heartbeat.
    heartbeat = task_call(
        running["task_id"],
        "heartbeat",
        {"worker_id": WORKER, "attempt": running["attempt"], "lease_token": running["lease_token"]},
    )
    assert heartbeat.status_code == 409
    assert heartbeat.get_json()["error"]["code"] == "task_cancelled"
    assert task_row(running["task_id"])["status"] == "cancelled"
