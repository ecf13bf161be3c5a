"""Task args instead of invented inputs, and result values the coordinator stores (issue 39)."""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from services import task_values
from services.task_values import MAX_ARGS_BYTES
from tests.integration.csv_worker import settings
from tests.integration.manifests import WORKER, manifest, result_body

MISSING = "6f1c1a1e-0000-4000-8000-000000000000"


def canonical(value: object) -> bytes:
    """The canonical JSON bytes the contract digests, written out here as the contract says."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def args_job(args_list: list, **job: object) -> dict:
    """A manifest job whose tasks give args, and no input_uri anywhere."""
    return {"workload": "echo", "tasks": [{"args": a} for a in args_list], **job}


def lease(claimed: dict) -> dict:
    """The lease fields of a call under the claimed task's attempt."""
    return {
        "worker_id": WORKER,
        "attempt": claimed["attempt"],
        "lease_token": claimed["lease_token"],
    }


def read_input(client, headers, claimed: dict):
    return client.get(
        f"/api/v1/tasks/{claimed['task_id']}/input",
        query_string={"worker_id": WORKER, "attempt": claimed["attempt"]},
        headers={**headers["worker"], "Chunkwise-Lease-Token": claimed["lease_token"]},
    )


def job_count(db) -> int:
    return db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"]


# --- args -------------------------------------------------------------------------------------


def test_a_task_given_args_gets_an_inline_input_uri_and_the_digest_of_their_canonical_json(
    submit, claim, task_row
):
    args = {"x": 3, "name": "é", "nested": [1, {"b": 2, "a": 1}]}
    submit(args_job([args]))

    [claimed] = claim()

    assert claimed["input_uri"] == f"inline:{claimed['task_id']}"
    assert claimed["input_sha256"] == hashlib.sha256(canonical(args)).hexdigest()
    assert task_row(claimed["task_id"])["args"] == canonical(args).decode()


def test_the_claim_carries_the_args_as_the_exact_text_their_digest_covers(submit, claim):
    submit(args_job([{"b": [1, 2], "a": "ü"}]))

    [claimed] = claim()

    text = claimed["args"]
    assert hashlib.sha256(text.encode()).hexdigest() == claimed["input_sha256"]
    assert json.loads(text) == {"a": "ü", "b": [1, 2]}
    assert claimed["max_result_bytes"] == 1024 * 1024


def test_a_task_without_args_is_claimed_with_args_null(submit, claim):
    submit(manifest(1))

    [claimed] = claim()

    assert claimed["args"] is None and claimed["input_uri"] == "s3://in/0"


def test_the_input_of_an_inline_task_is_its_canonical_args_whole_or_by_range(
    submit, claim, client, headers
):
    args = [1, "two", {"z": None, "y": 3.5}]
    submit(args_job([args]))
    [claimed] = claim()

    whole = read_input(client, headers, claimed)
    ranged = client.get(
        f"/api/v1/tasks/{claimed['task_id']}/input",
        query_string={"worker_id": WORKER, "attempt": claimed["attempt"]},
        headers={
            **headers["worker"],
            "Chunkwise-Lease-Token": claimed["lease_token"],
            "Range": "bytes=2-",
        },
    )

    assert whole.status_code == 200 and whole.data == canonical(args)
    assert hashlib.sha256(whole.data).hexdigest() == claimed["input_sha256"]
    assert ranged.status_code == 206 and ranged.data == canonical(args)[2:]


def test_a_job_may_mix_tasks_with_args_and_tasks_with_inputs_when_it_names_its_input_uri(
    submit, claim
):
    body = manifest(1)
    body["tasks"].append({"args": {"x": 1}})

    submit(body)

    claimed = claim(capacity=2)
    assert sorted(t["args"] is None for t in claimed) == [False, True]


def test_the_same_idempotency_key_with_other_args_is_a_conflict(client, headers):
    key = {**headers["user"], "Idempotency-Key": "args-1"}
    first = client.post("/api/v1/jobs", json=args_job([{"x": 1}]), headers=key)
    again = client.post("/api/v1/jobs", json=args_job([{"x": 1}]), headers=key)
    changed = client.post("/api/v1/jobs", json=args_job([{"x": 2}]), headers=key)

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.get_json()["id"] == first.get_json()["id"]
    assert changed.status_code == 409


BAD_ARGS = [
    pytest.param({"args": 3}, "args", id="a number"),
    pytest.param({"args": "text"}, "args", id="a string"),
    pytest.param({"args": None}, "args", id="null"),
    pytest.param({"args": {"k": "a\x00b"}}, "args", id="NUL in a value"),
    pytest.param({"args": ["\ud800"]}, "args", id="a lone surrogate"),
    pytest.param({"args": {"x": 1}, "input_uri": "s3://in/0"}, "args", id="args and input_uri"),
    pytest.param(
        {"args": {"x": 1}, "input_uri": "s3://in/0", "input_sha256": "a" * 64},
        "args",
        id="both forms",
    ),
    pytest.param({"parameters": {}}, "input_uri", id="neither form"),
    pytest.param({"input_uri": "s3://in/0"}, "input_sha256", id="input_uri alone"),
]


@pytest.mark.parametrize(("task", "field"), BAD_ARGS)
def test_a_task_with_bad_args_is_422_naming_the_task_and_field_and_nothing_is_written(
    task, field, client, headers, db
):
    before = job_count(db)
    body = {"workload": "echo", "input_uri": "s3://in/", "tasks": [{"args": [0]}, task]}

    response = client.post("/api/v1/jobs", json=body, headers=headers["user"])

    assert response.status_code == 422, response.get_json()
    error = response.get_json()["error"]
    assert error["code"] == "invalid_input"
    assert field in error["details"]["fields"]["tasks"]["1"]
    assert job_count(db) == before


def test_a_lone_surrogate_sent_as_an_escape_in_args_is_422_not_a_500(client, headers, db):
    before = job_count(db)
    body = '{"workload": "echo", "tasks": [{"args": {"k": "\\udc00"}}]}'

    response = client.post(
        "/api/v1/jobs", data=body, content_type="application/json", headers=headers["user"]
    )

    assert response.status_code == 422
    assert "args" in response.get_json()["error"]["details"]["fields"]["tasks"]["0"]
    assert job_count(db) == before


def test_args_over_the_size_limit_are_422_naming_tasks_n_args_and_nothing_is_written(
    client, headers, db
):
    before = job_count(db)
    big = {"blob": "x" * MAX_ARGS_BYTES}

    response = client.post("/api/v1/jobs", json=args_job([[1], big]), headers=headers["user"])

    assert response.status_code == 422
    assert "tasks.1.args" in response.get_json()["error"]["details"]["fields"]
    assert job_count(db) == before


def test_a_job_without_input_uri_must_give_args_for_every_task(client, headers, db):
    before = job_count(db)
    body = args_job([{"x": 1}])
    body["tasks"].append({"input_uri": "s3://in/1", "input_sha256": "b" * 64})

    response = client.post("/api/v1/jobs", json=body, headers=headers["user"])

    assert response.status_code == 422
    assert "input_uri" in response.get_json()["error"]["details"]["fields"]
    assert job_count(db) == before


# --- stored results ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", [9, None, [1, 2], {"b": 1, "a": "é"}, "text", 2.5, True], ids=repr
)
def test_a_result_value_is_stored_and_served_as_the_bytes_result_sha256_digests(
    value, submit, claim, task_call, client, headers
):
    submit(args_job([{"x": 1}]))
    [claimed] = claim()

    done = task_call(claimed["task_id"], "result", {**lease(claimed), "value": value})
    served = client.get(f"/api/v1/tasks/{claimed['task_id']}/result", headers=headers["user"])

    assert done.status_code == 200, done.get_json()
    task = done.get_json()
    assert task["status"] == "completed"
    assert task["result_uri"] == f"/api/v1/tasks/{claimed['task_id']}/result"
    assert task["result_sha256"] == hashlib.sha256(canonical(value)).hexdigest()
    assert served.status_code == 200 and served.mimetype == "application/json"
    assert served.data == canonical(value)


def test_a_batch_of_results_stores_every_value_it_accepts(submit, claim, client, headers):
    job = submit(args_job([{"x": i} for i in range(3)]))
    claimed = claim(capacity=3)
    items = [
        {
            "task_id": t["task_id"],
            "attempt": t["attempt"],
            "lease_token": t["lease_token"],
            "value": {"square": t["chunk_index"] ** 2},
        }
        for t in claimed
    ]
    body = {"worker_id": WORKER, "results": items}

    response = client.post("/api/v1/tasks/results", json=body, headers=headers["worker"])
    results = client.get(f"/api/v1/jobs/{job['id']}/results", headers=headers["user"]).get_json()

    assert [r["outcome"] for r in response.get_json()["results"]] == ["accepted"] * 3
    assert [r["value"] for r in results["results"]] == [{"square": i * i} for i in range(3)]


def test_a_value_and_a_manifest_in_one_result_are_422_naming_value(submit, claim, task_call):
    submit(args_job([{"x": 1}]))
    [claimed] = claim()
    body = {**result_body(claimed), "value": 1}

    response = task_call(claimed["task_id"], "result", body)

    assert response.status_code == 422
    assert "value" in response.get_json()["error"]["details"]["fields"]


@settings(CHUNKWISE_MAX_RESULT_BYTES="100")
def test_a_value_over_the_limit_is_refused_result_too_large_and_nothing_is_written(
    submit, claim, task_call, task_row, db
):
    submit(args_job([{"x": 1}]))
    [claimed] = claim()
    assert claimed["max_result_bytes"] == 100

    response = task_call(claimed["task_id"], "result", {**lease(claimed), "value": "x" * 99})

    assert response.status_code == 422
    error = response.get_json()["error"]
    assert error["code"] == "result_too_large"
    assert error["details"]["fields"] == {"value": [error["details"]["fields"]["value"][0]]}
    assert (error["details"]["limit"], error["details"]["size"]) == (100, 101)
    assert task_row(claimed["task_id"])["status"] == "leased"
    assert db.execute("SELECT count(*) AS n FROM task_results").fetchone()["n"] == 0


def test_a_replayed_value_is_answered_again_and_a_stale_other_value_changes_nothing(
    submit, claim, task_call, client, headers
):
    submit(args_job([{"x": 1}]))
    [claimed] = claim()
    first = task_call(claimed["task_id"], "result", {**lease(claimed), "value": 1})

    replay = task_call(claimed["task_id"], "result", {**lease(claimed), "value": 1})
    other = task_call(claimed["task_id"], "result", {**lease(claimed), "value": 2})
    served = client.get(f"/api/v1/tasks/{claimed['task_id']}/result", headers=headers["user"])

    assert (first.status_code, replay.status_code) == (200, 200)
    assert replay.get_json()["result_sha256"] == first.get_json()["result_sha256"]
    assert other.status_code == 409 and other.get_json()["error"]["code"] == "result_conflict"
    assert served.data == b"1"


def test_a_stale_attempts_value_after_a_retry_is_refused_and_the_new_one_kept(
    submit, claim, task_call, client, headers, time_passes, db
):
    submit(args_job([{"x": 1}]))
    [first] = claim()
    db.execute("UPDATE tasks SET lease_expires_at = now() - interval '1 second'")
    task_call(
        first["task_id"],
        "failure",
        {**lease(first), "error_code": "boom", "retryable": True},
    )
    time_passes()
    [second] = claim()
    task_call(second["task_id"], "result", {**lease(second), "value": "new"})

    stale = task_call(first["task_id"], "result", {**lease(first), "value": "old"})
    served = client.get(f"/api/v1/tasks/{first['task_id']}/result", headers=headers["user"])

    assert second["attempt"] == 2
    assert stale.status_code == 409
    assert served.data == b'"new"'


# --- reading results --------------------------------------------------------------------------


def test_a_stored_result_is_only_its_owners(submit, claim, task_call, client, headers):
    submit(args_job([{"x": 1}]))
    [claimed] = claim()
    task_call(claimed["task_id"], "result", {**lease(claimed), "value": 1})
    url = f"/api/v1/tasks/{claimed['task_id']}/result"

    other = client.get(url, headers=headers["other"])
    missing = client.get(f"/api/v1/tasks/{MISSING}/result", headers=headers["other"])
    worker = client.get(url, headers=headers["worker"])

    assert other.status_code == 404 and missing.status_code == 404
    assert other.get_json()["error"]["message"] == missing.get_json()["error"]["message"].replace(
        MISSING, claimed["task_id"]
    )
    assert worker.status_code == 403
    assert client.get(url, headers=headers["operator"]).status_code == 200


def test_a_task_whose_result_is_stored_elsewhere_has_no_stored_result(
    submit, claim, complete, client, headers
):
    submit(manifest(1))
    [claimed] = claim()
    complete(claimed)

    response = client.get(f"/api/v1/tasks/{claimed['task_id']}/result", headers=headers["user"])

    assert response.status_code == 404
    assert response.get_json()["error"]["code"] == "no_stored_result"


def test_a_jobs_results_are_its_values_in_chunk_order_a_page_at_a_time(
    submit, claim, task_call, client, headers
):
    job = submit(args_job([{"x": i} for i in range(5)]))
    leased = claim(capacity=5)
    for t in reversed(leased):
        task_call(t["task_id"], "result", {**lease(t), "value": t["chunk_index"] * 10})
    url = f"/api/v1/jobs/{job['id']}/results"

    pages, after = [], -1
    while after is not None:
        page = client.get(url, query_string={"after": after, "limit": 2}, headers=headers["user"])
        pages.append([(r["chunk_index"], r["value"]) for r in page.get_json()["results"]])
        after = page.get_json()["next_after"]

    assert pages == [[(0, 0), (1, 10)], [(2, 20), (3, 30)], [(4, 40)]]


def results_pages(client, headers, job: dict) -> list[list[int]]:
    """The chunk indexes of each page of a job's results, following next_after to the end."""
    pages, after = [], -1
    while after is not None:
        page = client.get(
            f"/api/v1/jobs/{job['id']}/results", query_string={"after": after}, headers=headers
        ).get_json()
        pages.append([r["chunk_index"] for r in page["results"]])
        after = page["next_after"]
    return pages


def test_a_results_page_ends_with_the_value_that_takes_it_past_the_byte_budget(
    submit, claim, task_call, client, headers, monkeypatch
):
    monkeypatch.setattr(task_values, "MAX_RESULT_PAGE_BYTES", 30)
    job = submit(args_job([{"x": i} for i in range(5)]))
    for t in claim(capacity=5):
        # Each value's canonical JSON is 20 bytes: two make a page past 30.
        task_call(t["task_id"], "result", {**lease(t), "value": "x" * 18})

    assert results_pages(client, headers["user"], job) == [[0, 1], [2, 3], [4]]


def test_a_results_page_holds_at_least_one_value_however_large(
    submit, claim, task_call, client, headers, monkeypatch
):
    monkeypatch.setattr(task_values, "MAX_RESULT_PAGE_BYTES", 10)
    job = submit(args_job([{"x": i} for i in range(3)]))
    for t in claim(capacity=3):
        task_call(t["task_id"], "result", {**lease(t), "value": "x" * 18})

    assert results_pages(client, headers["user"], job) == [[0], [1], [2], []]


def test_a_jobs_results_page_may_hold_ten_thousand_but_no_more(submit, client, headers):
    job = submit(args_job([[0]]))
    url = f"/api/v1/jobs/{job['id']}/results"

    full = client.get(url, query_string={"limit": 10000}, headers=headers["user"])
    over = client.get(url, query_string={"limit": 10001}, headers=headers["user"])
    assert full.status_code == 200
    assert over.status_code == 422 and "limit" in over.get_json()["error"]["details"]["fields"]


def test_another_users_job_results_are_404(submit, claim, task_call, client, headers):
    job = submit(args_job([{"x": 1}]))
    [claimed] = claim()
    task_call(claimed["task_id"], "result", {**lease(claimed), "value": 1})

    response = client.get(f"/api/v1/jobs/{job['id']}/results", headers=headers["other"])

    assert response.status_code == 404


def test_a_result_stored_elsewhere_is_listed_without_a_value(
    submit, claim, complete, client, headers
):
    job = submit(manifest(1))
    [claimed] = claim()
    complete(claimed)

    [result] = client.get(f"/api/v1/jobs/{job['id']}/results", headers=headers["user"]).get_json()[
        "results"
    ]

    assert "value" not in result and result["result_uri"].startswith("s3://out/")


def test_a_job_of_args_claimed_and_answered_with_values_reads_back_in_chunk_order(
    submit, claim, client, headers
):
    indexes = random.Random(39).sample(range(100), 20)
    body = {"workload": "echo", "tasks": [{"chunk_index": i, "args": {"x": i}} for i in indexes]}
    job = submit(body)
    leased = claim(capacity=20)
    random.Random(7).shuffle(leased)
    items = [
        {
            "task_id": t["task_id"],
            "attempt": t["attempt"],
            "lease_token": t["lease_token"],
            "value": json.loads(t["args"])["x"] ** 2,
        }
        for t in leased
    ]
    for first in (0, 10):
        batch = {"worker_id": WORKER, "results": items[first : first + 10]}
        answer = client.post("/api/v1/tasks/results", json=batch, headers=headers["worker"])
        assert [r["outcome"] for r in answer.get_json()["results"]] == ["accepted"] * 10

    read, after = [], -1
    while after is not None:
        page = client.get(
            f"/api/v1/jobs/{job['id']}/results",
            query_string={"after": after, "limit": 7},
            headers=headers["user"],
        ).get_json()
        read += page["results"]
        after = page["next_after"]
    state = client.get(f"/api/v1/jobs/{job['id']}", headers=headers["user"]).get_json()

    assert state["status"] == "succeeded"
    assert [r["chunk_index"] for r in read] == sorted(indexes)
    assert [r["value"] for r in read] == [i * i for i in sorted(indexes)]
    for r in read:
        assert r["result_sha256"] == hashlib.sha256(canonical(r["value"])).hexdigest()


def test_a_schedule_of_args_tasks_submits_them_with_their_args(client, headers, claim):
    body = {"cron": "*/5 * * * *", "job": args_job([{"x": 5}])}
    put = client.put("/api/v1/schedules/squares", json=body, headers=headers["user"])

    run = client.post("/api/v1/schedules/squares/run", headers=headers["user"])

    assert put.status_code == 201, put.get_json()
    assert run.status_code == 201, run.get_json()
    assert put.get_json()["job"]["tasks"][0]["args"] == {"x": 5}
    [claimed] = claim()
    assert claimed["args"] == '{"x":5}'


@settings(CHUNKWISE_USER_MAX_STORED_BYTES="2048")
def test_args_count_toward_a_users_stored_bytes(client, headers, db):
    big = [{"blob": "x" * 1200}]
    assert (
        client.post("/api/v1/jobs", json=args_job(big), headers=headers["user"]).status_code == 201
    )
    before = job_count(db)

    refused = client.post("/api/v1/jobs", json=args_job(big), headers=headers["user"])

    assert refused.status_code == 429
    assert refused.get_json()["error"]["code"] == "user_quota_exceeded"
    assert job_count(db) == before
