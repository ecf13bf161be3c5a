"""A manifest job's timeout_seconds bounds each attempt: past its deadline an attempt can
neither renew its lease nor report, and the sweep retries the task as timed_out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.metrics import QueueCollector
from services import tasks
from tests.integration.manifests import (
    OTHER_WORKER,
    WORKER,
    batch_item,
    manifest,
    result_body,
)


@pytest.fixture
def deadline_passes(db):
    """Move every running attempt's deadline and lease an hour back, as the clock would."""

    def elapse() -> None:
        db.execute(
            "UPDATE tasks SET deadline = deadline - interval '1 hour',"
            " lease_expires_at = lease_expires_at - interval '1 hour' WHERE status = 'leased'"
        )

    return elapse


def at(text: str) -> datetime:
    """A timestamp from the API."""
    return datetime.fromisoformat(text)


def seconds_from_now(text: str) -> float:
    """How far ahead of now a timestamp from the API lies."""
    return (at(text) - datetime.now(UTC)).total_seconds()


def test_a_claimed_attempt_is_told_its_deadline_and_its_lease_ends_by_it(submit, claim):
    job = submit(manifest(1, timeout_seconds=5))
    [leased] = claim()

    assert job["timeout_seconds"] == 5
    assert 3 <= seconds_from_now(leased["deadline"]) <= 5
    assert at(leased["lease_expires_at"]) == at(leased["deadline"])


def test_a_job_without_a_timeout_leases_for_the_usual_lease_and_names_no_deadline(submit, claim):
    job = submit(manifest(1))
    [leased] = claim()

    assert job["timeout_seconds"] is None
    assert leased["deadline"] is None
    assert 25 <= seconds_from_now(leased["lease_expires_at"]) <= 30


def test_a_heartbeat_renews_the_lease_only_up_to_the_deadline(submit, claim, task_call):
    submit(manifest(2, timeout_seconds=8))
    [near, _] = claim(capacity=2)
    body = {"worker_id": WORKER, "attempt": near["attempt"], "lease_token": near["lease_token"]}

    renewed = task_call(near["task_id"], "heartbeat", body)

    assert renewed.status_code == 200, renewed.get_json()
    assert at(renewed.get_json()["lease_expires_at"]) == at(near["deadline"])


def test_a_heartbeat_well_before_the_deadline_renews_the_usual_lease(submit, claim, task_call):
    submit(manifest(1, timeout_seconds=3600))
    [leased] = claim()

    lease = {"worker_id": WORKER, "attempt": 1, "lease_token": leased["lease_token"]}
    renewed = task_call(leased["task_id"], "heartbeat", lease)

    assert 25 <= seconds_from_now(renewed.get_json()["lease_expires_at"]) <= 30
    assert seconds_from_now(leased["deadline"]) > 3000


@pytest.mark.parametrize("action", ["heartbeat", "result", "failure"])
def test_past_its_deadline_an_attempt_can_neither_renew_nor_report(
    action, submit, claim, task_call, task_row, deadline_passes
):
    submit(manifest(1, timeout_seconds=60))
    [leased] = claim()
    deadline_passes()
    body = {
        "heartbeat": {"worker_id": WORKER, "attempt": 1, "lease_token": leased["lease_token"]},
        "result": result_body(leased),
        "failure": {
            "worker_id": WORKER,
            "attempt": 1,
            "lease_token": leased["lease_token"],
            "error_code": "boom",
            "retryable": False,
        },
    }[action]

    refused = task_call(leased["task_id"], action, body)

    assert refused.status_code == 409
    assert refused.get_json()["error"]["code"] == "timed_out"
    assert "timeout_seconds (60)" in refused.get_json()["error"]["message"]
    assert task_row(leased["task_id"])["status"] == "leased"  # until the sweep takes it back


def test_a_batch_refuses_only_the_items_past_their_deadline(
    client, headers, submit, claim, deadline_passes, db
):
    submit(manifest(1, timeout_seconds=60))
    [late] = claim()
    deadline_passes()
    submit(manifest(1))
    [timely] = claim()

    answer = client.post(
        "/api/v1/tasks/results",
        json={
            "worker_id": WORKER,
            "results": [batch_item(late), batch_item(timely)],
        },
        headers=headers["worker"],
    ).get_json()["results"]

    assert [(r["outcome"], r["status"]) for r in answer] == [("rejected", 409), ("accepted", 200)]
    assert answer[0]["error"]["code"] == "timed_out"


def test_the_sweep_retries_a_timed_out_attempt_without_spending_the_lost_worker_budget(
    rt, submit, claim, task_row, db, deadline_passes
):
    submit(manifest(1, timeout_seconds=60, max_attempts=3))
    [first] = claim()
    deadline_passes()

    [swept] = tasks.expire_leases(rt)

    row = task_row(first["task_id"])
    assert (row["status"], row["error_code"], row["lost_retries"]) == ("pending", "timed_out", 0)
    attempt = db.execute(
        "SELECT outcome, error_code FROM task_attempts WHERE task_id = %s AND attempt = 1",
        (first["task_id"],),
    ).fetchone()
    assert attempt == {"outcome": "retried", "error_code": "timed_out"}
    [second] = claim(OTHER_WORKER)
    assert second["attempt"] == 2
    assert seconds_from_now(second["deadline"]) > 50


def test_the_timed_out_worker_is_told_timed_out_after_the_sweep_and_the_retry(
    rt, submit, claim, task_call, deadline_passes
):
    submit(manifest(1, timeout_seconds=60))
    [first] = claim()
    deadline_passes()
    tasks.expire_leases(rt)
    claim(OTHER_WORKER)

    late = task_call(first["task_id"], "result", result_body(first))
    foreign = task_call(first["task_id"], "result", result_body(first, OTHER_WORKER))

    assert (late.status_code, late.get_json()["error"]["code"]) == (409, "timed_out")
    # Another worker id never held that lease: it hears no more than that.
    assert foreign.get_json()["error"]["code"] == "lease_lost"


def test_a_worker_that_died_before_its_deadline_lost_its_lease_not_its_time(
    rt, submit, claim, task_row
):
    submit(manifest(1, timeout_seconds=3600))
    [leased] = claim()

    tasks.expire_leases(rt, now=datetime.now(UTC) + timedelta(minutes=5))

    row = task_row(leased["task_id"])
    assert (row["error_code"], row["lost_retries"]) == ("lease_expired", 1)


def test_the_last_attempt_timing_out_fails_the_job_with_timed_out(
    rt, client, headers, submit, claim, deadline_passes
):
    job = submit(manifest(1, timeout_seconds=60, max_attempts=1))
    claim()
    deadline_passes()

    tasks.expire_leases(rt)

    failed = client.get(f"/api/v1/jobs/{job['id']}", headers=headers["user"]).get_json()
    assert failed["status"] == "failed"
    assert "timed_out" in str(failed["error"])
    [family] = [
        f for f in QueueCollector(rt).collect() if f.name == "chunkwise_cluster_chunk_failures"
    ]
    by_class = {s.labels["failure_class"]: s.value for s in family.samples}
    assert by_class["timed_out"] == 1 and sum(by_class.values()) == 1


def test_a_running_chunk_shows_its_deadline_and_a_finished_one_none(
    client, headers, submit, claim, complete
):
    job = submit(manifest(1, timeout_seconds=600))
    [leased] = claim()
    path = f"/api/v1/jobs/{job['id']}/chunks/{leased['task_id']}"

    running = client.get(path, headers=headers["user"]).get_json()
    complete(leased)
    done = client.get(path, headers=headers["user"]).get_json()

    assert at(running["deadline"]) == at(leased["deadline"])
    assert done["deadline"] is None


@pytest.mark.parametrize("value", [0, 86401, -1, 1.5, "1.5", "soon", True, [60], {}])
def test_a_timeout_out_of_range_or_not_a_whole_number_is_refused_and_nothing_written(
    value, client, headers, db
):
    refused = client.post(
        "/api/v1/jobs", json=manifest(1, timeout_seconds=value), headers=headers["user"]
    )

    assert refused.status_code == 422
    assert "timeout_seconds" in refused.get_json()["error"]["details"]["fields"]
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def test_a_timeout_is_part_of_what_an_idempotency_key_names(client, headers):
    key = {"Idempotency-Key": "timed", **headers["user"]}

    first = client.post("/api/v1/jobs", json=manifest(1, timeout_seconds=60), headers=key)
    again = client.post("/api/v1/jobs", json=manifest(1, timeout_seconds=60), headers=key)
    changed = client.post("/api/v1/jobs", json=manifest(1, timeout_seconds=61), headers=key)
    without = client.post("/api/v1/jobs", json=manifest(1), headers=key)

    assert (first.status_code, again.status_code) == (201, 200)
    assert changed.get_json()["error"]["code"] == "idempotency_conflict"
    assert without.get_json()["error"]["code"] == "idempotency_conflict"
