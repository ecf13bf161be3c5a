"""Caps per workload: csv_stats keeps the CSV platform's, manifest workloads get their own."""

from __future__ import annotations

import threading

import pytest

from tests.integration.manifests import WORKER, batch_item, manifest


@pytest.fixture
def app_config(app_config):
    """Small manifest caps, so a test can reach them."""
    return {
        **app_config,
        "CHUNKWISE_MANIFEST_MAX_QUEUED_TASKS": "600",
        "CHUNKWISE_MANIFEST_MAX_TASKS_PER_JOB": "400",
    }


def test_a_manifest_job_may_be_larger_than_the_csv_queue(client, headers, db):
    response = client.post("/api/v1/jobs", json=manifest(300), headers=headers["user"])
    assert response.status_code == 201, response.get_json()
    assert db.execute("SELECT count(*) AS n FROM tasks").fetchone()["n"] == 300


def test_a_manifest_job_over_the_per_job_cap_is_422_and_stores_nothing(client, headers, db):
    response = client.post("/api/v1/jobs", json=manifest(401), headers=headers["user"])
    assert response.status_code == 422
    assert response.get_json()["error"]["details"]["fields"] == {
        "tasks": ["a job may have at most 400 tasks"]
    }
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def test_a_manifest_job_that_overflows_its_workloads_queue_is_429_and_stores_nothing(
    client, headers, db
):
    assert (
        client.post("/api/v1/jobs", json=manifest(400), headers=headers["user"]).status_code == 201
    )
    response = client.post("/api/v1/jobs", json=manifest(201), headers=headers["user"])
    assert response.status_code == 429
    assert response.headers["Retry-After"]
    assert response.get_json()["error"]["details"] == {
        "queued_chunks": 400,
        "requested_chunks": 201,
        "limit": 600,
    }
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 1


def test_one_workloads_queue_does_not_count_anothers(client, headers):
    # The echo queue holds 400 of its 600; render has a queue of its own.
    assert (
        client.post("/api/v1/jobs", json=manifest(400), headers=headers["user"]).status_code == 201
    )
    other = {**manifest(400), "workload": "render"}
    assert client.post("/api/v1/jobs", json=other, headers=headers["user"]).status_code == 201


def test_an_uncapped_workload_leases_a_whole_claims_capacity_at_once(submit, claim):
    submit(manifest(64))
    assert len(claim(WORKER, capacity=64)) == 64


def test_csv_stats_keeps_its_lease_caps(rt):
    caps = rt.workloads.of("csv_stats").caps
    assert (caps.max_leases_per_worker, caps.max_leases_total) == (2, 8)
    assert (caps.max_queued_tasks, caps.max_tasks_per_job) == (256, 64)


# --- the queue bound (sql/0008): admission adds, nothing subtracts, a count corrects it -----


def drain(claim, client, headers) -> None:
    """Claim every pending echo task and report each one's result, in batches."""
    while claimed := claim(WORKER, capacity=400):
        items = [batch_item(t) for t in claimed]
        response = client.post(
            "/api/v1/tasks/results",
            json={"worker_id": WORKER, "results": items},
            headers=headers["worker"],
        )
        assert response.status_code == 200, response.get_json()


def queue_bound(db) -> int:
    """What admission believes the echo queue holds at most."""
    return db.execute("SELECT unfinished FROM queue_bounds WHERE workload = 'echo'").fetchone()[
        "unfinished"
    ]


def unfinished(db) -> int:
    """Echo tasks pending or leased: what the cap is about."""
    return db.execute(
        "SELECT count(*) AS n FROM tasks"
        " WHERE workload = 'echo' AND status IN ('pending', 'leased')"
    ).fetchone()["n"]


def test_finished_tasks_stay_in_the_bound_until_a_job_needs_their_room(
    submit, claim, client, headers, db
):
    submit(manifest(300))
    drain(claim, client, headers)
    assert (unfinished(db), queue_bound(db)) == (0, 300)

    response = client.post("/api/v1/jobs", json=manifest(400), headers=headers["user"])

    # 300 + 400 overflows the bound, so admission counted the queue: it was empty.
    assert response.status_code == 201, response.get_json()
    assert (unfinished(db), queue_bound(db)) == (400, 400)


def test_a_retry_that_would_overfill_the_queue_is_429_and_changes_nothing(
    submit, claim, task_call, client, headers, db
):
    failing = submit(manifest(400))
    [doomed] = claim(WORKER)
    failure = {"worker_id": WORKER, "attempt": 1, "error_code": "oom", "retryable": False}
    failure["lease_token"] = doomed["lease_token"]
    assert task_call(doomed["task_id"], "failure", failure).status_code == 200
    before = db.execute("SELECT id, status, version FROM tasks ORDER BY id").fetchall()
    submit(manifest(300))  # overflows the bound: the count finds the failed job's tasks done

    retried = client.post(f"/api/v1/jobs/{failing['id']}/retry", headers=headers["user"])

    assert retried.status_code == 429, retried.get_json()
    assert retried.headers["Retry-After"]
    assert retried.get_json()["error"]["details"] == {
        "queued_chunks": 300,
        "requested_chunks": 400,
        "limit": 600,
    }
    assert (
        db.execute(
            "SELECT id, status, version FROM tasks WHERE job_id = %s ORDER BY id", (failing["id"],)
        ).fetchall()
        == before
    )
    assert (
        client.get(f"/api/v1/jobs/{failing['id']}", headers=headers["user"]).get_json()["status"]
        == "failed"
    )
    assert unfinished(db) == 300


def test_a_retry_whose_dependents_would_overfill_the_queue_is_429_and_changes_nothing(
    submit, claim, task_call, client, headers, db
):
    first = submit(manifest(1))
    then = submit(manifest(300, depends_on=[first["id"]]))
    [doomed] = claim(WORKER)
    failure = {"worker_id": WORKER, "attempt": 1, "error_code": "oom", "retryable": False}
    failure["lease_token"] = doomed["lease_token"]
    assert task_call(doomed["task_id"], "failure", failure).status_code == 200
    before = db.execute("SELECT id, status, version FROM tasks ORDER BY id").fetchall()
    submit(manifest(300))

    retried = client.post(f"/api/v1/jobs/{first['id']}/retry", headers=headers["user"])

    assert retried.status_code == 429, retried.get_json()
    assert retried.get_json()["error"]["details"] == {
        "queued_chunks": 300,
        "requested_chunks": 301,  # the retried job's task and its dependent's 300
        "limit": 600,
    }
    assert (
        db.execute(
            "SELECT id, status, version FROM tasks WHERE job_id = ANY(%s) ORDER BY id",
            ([first["id"], then["id"]],),
        ).fetchall()
        == before
    )
    statuses = [
        client.get(f"/api/v1/jobs/{job['id']}", headers=headers["user"]).get_json()["status"]
        for job in (first, then)
    ]
    assert statuses == ["failed", "failed"]
    assert unfinished(db) == 300


def test_a_retried_job_counts_against_the_queue_again(submit, claim, task_call, client, headers):
    failing = submit(manifest(400))
    [doomed] = claim(WORKER)
    failure = {"worker_id": WORKER, "attempt": 1, "error_code": "oom", "retryable": False}
    failure["lease_token"] = doomed["lease_token"]
    assert task_call(doomed["task_id"], "failure", failure).status_code == 200
    submit(manifest(200))  # overflows the bound: the count finds the failed job's tasks done
    retried = client.post(f"/api/v1/jobs/{failing['id']}/retry", headers=headers["user"])
    assert retried.status_code == 200, retried.get_json()

    response = client.post("/api/v1/jobs", json=manifest(1), headers=headers["user"])

    assert response.status_code == 429
    assert response.get_json()["error"]["details"] == {
        "queued_chunks": 600,
        "requested_chunks": 1,
        "limit": 600,
    }


def race(app, headers, submitters: int, body: dict, **extra_headers: str) -> list:
    """POST the same job body from `submitters` threads at once; their responses."""
    barrier = threading.Barrier(submitters)
    responses: list = []

    def submit_once() -> None:
        racer = app.test_client()
        barrier.wait()
        responses.append(
            racer.post("/api/v1/jobs", json=body, headers={**headers["user"], **extra_headers})
        )

    threads = [threading.Thread(target=submit_once) for _ in range(submitters)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return responses


def test_racing_submitters_never_overfill_a_queue_whose_bound_is_stale(
    app, submit, claim, client, headers, db
):
    submit(manifest(400))
    drain(claim, client, headers)

    responses = race(app, headers, 8, manifest(200))

    assert sorted(r.status_code for r in responses) == [201] * 3 + [429] * 5
    assert unfinished(db) == queue_bound(db) == 600


def test_racing_submitters_with_one_idempotency_key_create_one_job(app, headers, db):
    responses = race(app, headers, 6, manifest(3), **{"Idempotency-Key": "same-request"})

    assert sorted(r.status_code for r in responses) == [200] * 5 + [201]
    assert len({r.get_json()["id"] for r in responses}) == 1
    assert db.execute("SELECT count(*) AS n FROM tasks").fetchone()["n"] == 3


def test_racing_submitters_with_one_key_that_fills_the_queue_all_get_the_one_job(
    app, submit, headers, db
):
    submit(manifest(400))

    # The first to commit leaves no room: the others must find its job, not a full queue.
    responses = race(app, headers, 6, manifest(200), **{"Idempotency-Key": "fills-it"})

    assert sorted(r.status_code for r in responses) == [200] * 5 + [201]
    assert len({r.get_json()["id"] for r in responses}) == 1
    assert unfinished(db) == 600
