"""POST /api/v1/tasks/results: many results in one transaction, each fenced on its own."""

from __future__ import annotations

import uuid

from repositories import tasks as task_rows
from tests.integration.manifests import OTHER_WORKER, WORKER, batch_item, manifest


def batch(client, headers, items: list[dict], worker_id: str = WORKER):
    """POST a batch of result items as the worker."""
    return client.post(
        "/api/v1/tasks/results",
        json={"worker_id": worker_id, "results": items},
        headers=headers["worker"],
    )


def test_a_batch_completes_every_task_and_the_last_one_finishes_the_job(
    submit, claim, client, headers, task_row, job_row
):
    job = submit(manifest(5))
    leased = claim(WORKER, capacity=5)
    response = batch(client, headers, [batch_item(t) for t in leased])
    assert response.status_code == 200, response.get_json()
    outcomes = response.get_json()["results"]
    assert [o["task_id"] for o in outcomes] == [t["task_id"] for t in leased]
    assert {(o["outcome"], o["status"], o["error"]) for o in outcomes} == {("accepted", 200, None)}
    assert job_row(job["id"])["status"] == "succeeded"
    assert {task_row(t["task_id"])["status"] for t in leased} == {"completed"}


def test_one_refused_item_refuses_only_itself(submit, claim, client, headers, task_row):
    submit(manifest(3))
    good, stale, invalid = claim(WORKER, capacity=3)
    items = [
        batch_item(good),
        {**batch_item(stale), "attempt": stale["attempt"] + 1},
        {**batch_item(invalid), "result_uri": None},
        {**batch_item(good), "task_id": str(uuid.uuid4())},
    ]
    response = batch(client, headers, items)
    assert response.status_code == 200
    outcomes = response.get_json()["results"]
    assert [(o["outcome"], o["status"]) for o in outcomes] == [
        ("accepted", 200),
        ("rejected", 409),
        ("rejected", 422),
        ("rejected", 404),
    ]
    assert outcomes[1]["error"]["code"] == "lease_lost"
    assert outcomes[2]["error"]["details"]["fields"] == {"result_uri": ["required"]}
    assert task_row(good["task_id"])["status"] == "completed"
    assert task_row(stale["task_id"])["status"] == "leased"
    assert task_row(invalid["task_id"])["status"] == "leased"


def test_another_workers_batch_is_refused_with_lease_lost_per_item(
    submit, claim, client, headers, task_row
):
    submit(manifest(2))
    leased = claim(WORKER, capacity=2)
    response = batch(client, headers, [batch_item(t) for t in leased], worker_id=OTHER_WORKER)
    outcomes = response.get_json()["results"]
    assert {(o["status"], o["error"]["code"]) for o in outcomes} == {(409, "lease_lost")}
    assert {task_row(t["task_id"])["status"] for t in leased} == {"leased"}


def test_a_repeated_batch_is_replayed_and_a_changed_result_conflicts(
    submit, claim, client, headers
):
    submit(manifest(2))
    first, second = claim(WORKER, capacity=2)
    assert batch(client, headers, [batch_item(first), batch_item(second)]).status_code == 200
    items = [batch_item(first), batch_item(second, tag="other")]
    outcomes = batch(client, headers, items).get_json()
    assert [(o["outcome"], o["status"]) for o in outcomes["results"]] == [
        ("replayed", 200),
        ("rejected", 409),
    ]
    assert outcomes["results"][1]["error"]["code"] == "result_conflict"


def test_a_batch_counts_every_task_on_the_worker(submit, claim, client, headers, db):
    submit(manifest(3))
    leased = claim(WORKER, capacity=3)
    batch(client, headers, [batch_item(t) for t in leased])
    row = db.execute("SELECT tasks_done FROM workers WHERE id = %s", (WORKER,)).fetchone()
    assert row["tasks_done"] == 3


def test_a_malformed_batch_is_422_naming_the_field_and_changes_nothing(
    submit, claim, client, headers, task_row
):
    submit(manifest(1))
    [leased] = claim(WORKER)
    response = batch(client, headers, [{**batch_item(leased), "attempt": "one"}])
    assert response.status_code == 422
    assert "results" in response.get_json()["error"]["details"]["fields"]
    assert batch(client, headers, []).status_code == 422
    assert task_row(leased["task_id"])["status"] == "leased"


def test_user_tokens_cannot_post_result_batches(client, headers):
    response = client.post(
        "/api/v1/tasks/results",
        json={"worker_id": WORKER, "results": []},
        headers=headers["user"],
    )
    assert response.status_code == 403


def test_a_task_deleted_after_the_batch_read_it_is_answered_404_in_its_item(
    submit, claim, client, headers, db, monkeypatch
):
    submit(manifest(2))
    kept, gone = claim(WORKER, capacity=2)
    read_before = task_rows.get_many

    def read_then_lose_one(conn, task_ids):
        # What the batch read first; then retention deletes the task, job and all.
        found = read_before(conn, task_ids)
        db.execute("DELETE FROM tasks WHERE id = %s", (gone["task_id"],))
        return found

    monkeypatch.setattr(task_rows, "get_many", read_then_lose_one)

    response = batch(client, headers, [batch_item(kept), batch_item(gone)])

    assert response.status_code == 200, response.get_json()
    accepted, lost = response.get_json()["results"]
    assert (accepted["outcome"], lost["outcome"], lost["status"]) == ("accepted", "rejected", 404)
