"""POST /api/v1/tasks/results?claim=N: a batch of results, then a claim, in one request."""

from __future__ import annotations

import pytest

from services import credentials
from tests.integration.manifests import WORKER, batch_item, manifest


@pytest.fixture
def rogue(rt) -> dict:
    """Headers of a second worker credential."""
    token = credentials.issue_worker_token(rt.pool, "rogue").token
    return {"Authorization": f"Bearer {token}"}


def complete_and_claim(client, headers, items, claim="2", **body):
    """POST the results with ?claim= as the worker, serving the echo workload."""
    return client.post(
        f"/api/v1/tasks/results?claim={claim}",
        json={"worker_id": WORKER, "results": items, "workloads": ["echo"], **body},
        headers=headers,
    )


def statuses(db) -> dict:
    rows = db.execute("SELECT status, count(*) AS n FROM tasks GROUP BY status").fetchall()
    return {r["status"]: r["n"] for r in rows}


def test_the_results_are_recorded_and_the_next_tasks_leased_as_the_two_calls_would(
    submit, claim, client, headers, task_row, job_row
):
    job = submit(manifest(4))
    first = claim(WORKER, capacity=2)

    response = complete_and_claim(client, headers["worker"], [batch_item(t) for t in first])

    assert response.status_code == 200, response.get_json()
    answer = response.get_json()
    assert [(o["task_id"], o["outcome"]) for o in answer["results"]] == [
        (t["task_id"], "accepted") for t in first
    ]
    assert answer["claim_error"] is None
    assert len(answer["tasks"]) == 2
    assert {t["task_id"] for t in answer["tasks"]}.isdisjoint({t["task_id"] for t in first})
    # Each leased task is what a claim gives, and its lease works like one.
    assert [sorted(t) for t in answer["tasks"]] == [sorted(first[0])] * 2
    assert answer["heartbeat_seconds"] == first[0]["heartbeat_seconds"]
    assert answer["max_result_bytes"] == first[0]["max_result_bytes"]
    for leased in answer["tasks"]:
        row = task_row(leased["task_id"])
        assert (row["status"], row["lease_owner"]) == ("leased", WORKER)
    assert {task_row(t["task_id"])["status"] for t in first} == {"completed"}
    final = complete_and_claim(client, headers["worker"], [batch_item(t) for t in answer["tasks"]])
    assert {o["outcome"] for o in final.get_json()["results"]} == {"accepted"}
    assert final.get_json()["tasks"] == []
    assert job_row(job["id"])["status"] == "succeeded"


def test_without_a_free_task_the_results_are_still_recorded(submit, claim, client, headers, db):
    submit(manifest(1))
    [leased] = claim(WORKER)

    response = complete_and_claim(client, headers["worker"], [batch_item(leased)], claim="5")

    assert response.status_code == 200
    assert response.get_json()["tasks"] == []
    assert response.get_json()["claim_error"] is None
    assert statuses(db) == {"completed": 1}


def test_a_stale_result_is_refused_on_its_own_and_the_claim_still_leases(
    submit, claim, client, headers, task_row
):
    submit(manifest(3))
    good, stale = claim(WORKER, capacity=2)
    items = [batch_item(good), {**batch_item(stale), "attempt": stale["attempt"] + 1}]

    answer = complete_and_claim(client, headers["worker"], items, claim="1").get_json()

    assert [(o["outcome"], o["status"]) for o in answer["results"]] == [
        ("accepted", 200),
        ("rejected", 409),
    ]
    assert answer["results"][1]["error"]["code"] == "lease_lost"
    [fresh] = answer["tasks"]
    assert fresh["task_id"] not in (good["task_id"], stale["task_id"])
    assert task_row(stale["task_id"])["status"] == "leased"
    assert task_row(fresh["task_id"])["lease_owner"] == WORKER


def test_a_worker_id_bound_to_another_credential_leases_nothing_and_completes_nothing(
    submit, claim, client, rogue, db
):
    submit(manifest(3))
    leased = claim(WORKER)
    workers_before = db.execute("SELECT * FROM workers ORDER BY id").fetchall()

    response = complete_and_claim(client, rogue, [batch_item(t) for t in leased])

    assert response.status_code == 200
    answer = response.get_json()
    assert [(o["status"], o["error"]["code"]) for o in answer["results"]] == [
        (403, "worker_id_taken")
    ]
    assert answer["tasks"] == []
    assert answer["claim_error"]["code"] == "worker_id_taken"
    assert list(answer["claim_error"]["details"]["fields"]) == ["worker_id"]
    assert db.execute("SELECT * FROM workers ORDER BY id").fetchall() == workers_before
    assert statuses(db) == {"leased": 1, "pending": 2}


@pytest.mark.parametrize("count", ["0", "1001", "two", "1.5", "", "2&claim=3"])
def test_a_bad_claim_count_is_422_naming_claim_and_records_nothing(
    count, submit, claim, client, headers, db
):
    submit(manifest(2))
    [leased] = claim(WORKER)

    refused = complete_and_claim(client, headers["worker"], [batch_item(leased)], claim=count)

    assert refused.status_code == 422
    assert list(refused.get_json()["error"]["details"]["fields"]) == ["claim"]
    assert statuses(db) == {"leased": 1, "pending": 1}


@pytest.mark.parametrize(
    ("query", "workloads"),
    [("?claim=2", None), ("", ["echo"]), ("?claim=2", ["no-such-workload"]), ("?claim=2", [])],
    ids=["claim-without-workloads", "workloads-without-claim", "unknown-workload", "none"],
)
def test_workloads_go_with_claim_and_a_refusal_records_nothing(
    query, workloads, submit, claim, client, headers, db
):
    submit(manifest(2))
    [leased] = claim(WORKER)
    body = {"worker_id": WORKER, "results": [batch_item(leased)]}
    if workloads is not None:
        body["workloads"] = workloads

    response = client.post(f"/api/v1/tasks/results{query}", json=body, headers=headers["worker"])

    assert response.status_code == 422
    assert list(response.get_json()["error"]["details"]["fields"]) == ["workloads"]
    assert statuses(db) == {"leased": 1, "pending": 1}
