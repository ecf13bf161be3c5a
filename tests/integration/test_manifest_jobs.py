"""Manifest jobs end to end: atomic admission, status, results, cancel and retry."""

from __future__ import annotations

import random
import uuid

import psycopg
import pytest

from repositories.jobs import NewJob
from repositories.tasks import NewTask
from services import jobs, task_values
from tests.integration.manifests import OTHER_WORKER, WORKER, manifest, result_body, sha256_of

# What a job creation writes; the audit log also holds the test's credentials being issued.
COUNTS_A_JOB_WRITES = {
    "jobs": "SELECT count(*) AS n FROM jobs",
    "tasks": "SELECT count(*) AS n FROM tasks",
    "outbox": "SELECT count(*) AS n FROM outbox",
    "audit_log": "SELECT count(*) AS n FROM audit_log WHERE action LIKE 'job.%%'",
}


def row_counts(db) -> dict[str, int]:
    """How many rows of each kind a job creation writes there are."""
    return {name: db.execute(sql).fetchone()["n"] for name, sql in COUNTS_A_JOB_WRITES.items()}


def new_job(chunks: int) -> NewJob:
    """A job row as create_job would build it."""
    return NewJob(
        id=uuid.uuid4(),
        owner_id=0,
        workload="echo",
        input_uri="s3://in/",
        input_sha256=None,
        parameters={},
        labels={},
        priority=0,
        chunks_total=chunks,
        idempotency_key=None,
        request_sha256=None,
        trace_id=uuid.uuid4().hex,
        max_attempts=3,
    )


def new_task(job: NewJob, chunk_index: int, task_id: uuid.UUID | None = None) -> NewTask:
    """A task row of `job`."""
    return NewTask(
        id=task_id or jobs.task_id(job.id, chunk_index),
        chunk_index=chunk_index,
        input_uri=f"s3://in/{chunk_index}",
        input_sha256=sha256_of(str(chunk_index)),
        parameters={},
        max_attempts=3,
    )


# --- admission --------------------------------------------------------------------------------


def duplicate_chunk_index(job: NewJob) -> list[NewTask]:
    return [new_task(job, 0), new_task(job, 1), new_task(job, 1, task_id=uuid.uuid4())]


def negative_chunk_index(job: NewJob) -> list[NewTask]:
    return [new_task(job, 0), new_task(job, -1)]


def duplicate_task_id(job: NewJob) -> list[NewTask]:
    same = uuid.uuid4()
    return [new_task(job, 0, task_id=same), new_task(job, 1, task_id=same)]


@pytest.mark.parametrize(
    "bad_tasks",
    [duplicate_chunk_index, negative_chunk_index, duplicate_task_id],
)
def test_a_job_whose_task_insert_fails_leaves_no_job_no_task_and_no_event(bad_tasks, rt, user, db):
    job = new_job(3)
    job = NewJob(**{**job.__dict__, "owner_id": user.user_id})
    before = row_counts(db)

    with pytest.raises(psycopg.IntegrityError):
        jobs.admit(rt, user, job, bad_tasks(job))

    assert row_counts(db) == before == dict.fromkeys(COUNTS_A_JOB_WRITES, 0)


def test_the_queue_still_admits_jobs_after_a_failed_admission(rt, user, db, submit):
    job = NewJob(**{**new_job(2).__dict__, "owner_id": user.user_id})
    with pytest.raises(psycopg.IntegrityError):
        jobs.admit(rt, user, job, duplicate_chunk_index(job))

    created = submit(manifest(2))

    assert row_counts(db)["jobs"] == 1
    assert created["chunks_total"] == 2


def test_an_admission_writes_the_job_its_tasks_its_event_and_its_audit_row_together(rt, user, db):
    spec = jobs.JobSpec(
        workload="echo",
        input_uri="s3://in/",
        parameters={},
        tasks=[jobs.TaskSpec("s3://in/0", sha256_of("0"), {})] * 2,
    )

    view = jobs.create_job(rt, user, spec, trace_id="ab" * 16)

    event = db.execute("SELECT job_id, owner_id, event, payload, trace_id FROM outbox").fetchone()
    assert event == {
        "job_id": view.job.id,
        "owner_id": user.user_id,
        "event": "job.created",
        "payload": {"chunks_total": 2, "workload": "echo"},
        "trace_id": "ab" * 16,
    }
    audit = db.execute(
        "SELECT actor, action, target, trace_id FROM audit_log WHERE action = 'job.create'"
    ).fetchone()
    assert audit == {
        "actor": user.name,
        "action": "job.create",
        "target": str(view.job.id),
        "trace_id": "ab" * 16,
    }
    assert row_counts(db) == {"jobs": 1, "tasks": 2, "outbox": 1, "audit_log": 1}


def test_a_manifest_with_repeated_chunk_indexes_is_422_and_stores_nothing(client, headers, db):
    response = client.post("/api/v1/jobs", json=manifest([0, 1, 1]), headers=headers["user"])

    assert response.status_code == 422
    assert "tasks" in response.get_json()["error"]["details"]["fields"]
    assert row_counts(db) == dict.fromkeys(COUNTS_A_JOB_WRITES, 0)


def test_an_idempotent_resubmission_returns_the_original_job(client, headers, db):
    key = {"Idempotency-Key": "job-1", **headers["user"]}

    first = client.post("/api/v1/jobs", json=manifest(2), headers=key)
    again = client.post("/api/v1/jobs", json=manifest(2), headers=key)
    changed = client.post("/api/v1/jobs", json=manifest(3), headers=key)

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.get_json()["id"] == first.get_json()["id"]
    assert changed.status_code == 409
    assert changed.get_json()["error"]["code"] == "idempotency_conflict"
    assert row_counts(db)["jobs"] == 1


# --- aggregate status -------------------------------------------------------------------------

JOB_FIELDS = {
    "id",
    "workload",
    "status",
    "revision",
    "priority",
    "chunks_total",
    "chunks_by_state",
    "chunks_completed",
    "progress",
    "error",
    "created_at",
    "started_at",
    "completed_at",
}


def test_a_manifest_job_goes_queued_running_succeeded_with_its_aggregate_status(
    submit, claim, complete, client, headers
):
    created = submit(manifest(2, priority=7))
    etags = []

    def view() -> dict:
        response = client.get(f"/api/v1/jobs/{created['id']}", headers=headers["user"])
        assert response.status_code == 200
        etags.append(response.headers["ETag"])
        return response.get_json()

    queued = view()
    assert set(queued) >= JOB_FIELDS
    assert queued == {**created, "trace_id": queued["trace_id"]}
    assert (queued["status"], queued["workload"], queued["priority"]) == ("queued", "echo", 7)
    assert (queued["chunks_total"], queued["chunks_completed"], queued["progress"]) == (2, 0, 0)
    assert queued["chunks_by_state"] == {
        "pending": 2,
        "leased": 0,
        "completed": 0,
        "failed": 0,
        "cancelled": 0,
    }
    assert (queued["error"], queued["started_at"], queued["completed_at"]) == (None, None, None)

    [first] = claim(WORKER)
    running = view()
    assert running["status"] == "running"
    assert running["started_at"] is not None and running["completed_at"] is None
    assert running["chunks_by_state"]["leased"] == 1
    assert running["revision"] > queued["revision"]

    complete(first)
    halfway = view()
    assert halfway["status"] == "running"
    assert halfway["chunks_completed"] == 1
    assert halfway["progress"] == pytest.approx(1 / 3)

    [second] = claim(WORKER)
    complete(second)
    done = view()
    assert done["status"] == "succeeded"
    assert (done["chunks_completed"], done["progress"]) == (2, 1.0)
    assert done["chunks_by_state"]["completed"] == 2
    assert done["completed_at"] is not None and done["error"] is None
    assert done["revision"] > halfway["revision"]
    assert len(set(etags)) == len(etags), "each view showed something new, so each ETag is new"


def test_a_tasks_parameters_reach_the_worker_whole_whatever_their_names(
    submit, claim, client, headers
):
    mine = {"byte_start": 0, "byte_end": 100, "record_start": "mine", "keep": 1}
    body = manifest(1)
    body["tasks"][0]["parameters"] = mine
    job = submit(body)

    [leased] = claim(WORKER)
    [chunk] = client.get(f"/api/v1/jobs/{job['id']}/chunks", headers=headers["user"]).get_json()[
        "chunks"
    ]

    assert leased["parameters"] == mine
    assert (chunk["record_start"], chunk["record_end"]) == (None, None)


def test_a_jobs_chunks_come_a_page_at_a_time_in_chunk_order(submit, client, headers):
    job = submit(manifest(5))
    url = f"/api/v1/jobs/{job['id']}/chunks"

    pages, after = [], -1
    while True:
        page = client.get(url, query_string={"after": after, "limit": 2}, headers=headers["user"])
        body = page.get_json()
        pages.append([c["index"] for c in body["chunks"]])
        if not body["chunks"]:
            break
        after = body["next_after"]

    assert pages == [[0, 1], [2, 3], [4], []]
    assert body["next_after"] == 4
    whole = client.get(url, headers=headers["user"]).get_json()["chunks"]
    assert [c["index"] for c in whole] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("name", "value"), [("after", "-2"), ("limit", "0"), ("limit", "1001"), ("after", "x")]
)
def test_a_chunk_page_out_of_bounds_is_422_naming_the_parameter(
    name, value, submit, client, headers
):
    job = submit(manifest(1))

    response = client.get(
        f"/api/v1/jobs/{job['id']}/chunks", query_string={name: value}, headers=headers["user"]
    )

    assert response.status_code == 422
    assert list(response.get_json()["error"]["details"]["fields"]) == [name]


def test_a_chunk_of_another_job_is_404_under_this_jobs_path(submit, client, headers):
    job, other = submit(manifest(1)), submit(manifest(1))
    [theirs] = client.get(f"/api/v1/jobs/{other['id']}/chunks", headers=headers["user"]).get_json()[
        "chunks"
    ]

    response = client.get(
        f"/api/v1/jobs/{job['id']}/chunks/{theirs['id']}", headers=headers["user"]
    )

    assert response.status_code == 404
    mine = client.get(f"/api/v1/jobs/{other['id']}/chunks/{theirs['id']}", headers=headers["user"])
    assert mine.get_json()["index"] == 0


def test_every_listed_jobs_chunks_by_state_equal_a_count_of_its_tasks(
    submit, claim, complete, task_call, client, headers, db
):
    succeeded = submit(manifest(2))
    for task in claim(WORKER, capacity=2):
        complete(task)
    failed = submit(manifest(3, max_attempts=1))
    [broken, _] = claim(WORKER, capacity=2)
    body = {"worker_id": WORKER, "attempt": 1, "error_code": "boom", "error_message": "no"}
    body["lease_token"] = broken["lease_token"]
    task_call(broken["task_id"], "failure", {**body, "retryable": False, "details": {}})
    cancelled = submit(manifest(2))
    client.post(f"/api/v1/jobs/{cancelled['id']}/cancel", headers=headers["user"])
    running = submit(manifest(2))
    claim(WORKER)

    listed = client.get("/api/v1/jobs", headers=headers["user"]).get_json()["jobs"]

    shown = {job["id"]: (job["status"], job["chunks_by_state"]) for job in listed}
    for job in (succeeded, failed, cancelled, running):
        counted = dict.fromkeys(("pending", "leased", "completed", "failed", "cancelled"), 0)
        for row in db.execute("SELECT status FROM tasks WHERE job_id = %s", (job["id"],)):
            counted[row["status"]] += 1
        assert shown[job["id"]][1] == counted, shown[job["id"]][0]
    assert {status for status, _ in shown.values()} == {
        "succeeded",
        "failed",
        "cancelled",
        "running",
    }


def test_the_job_list_shows_the_callers_jobs_newest_first(submit, client, headers):
    older = submit(manifest(1))
    newer = submit(manifest(1))
    submit(manifest(1), as_="other")

    listed = client.get("/api/v1/jobs", headers=headers["user"]).get_json()

    assert [j["id"] for j in listed["jobs"]] == [newer["id"], older["id"]]


def test_the_job_list_filters_by_label(submit, client, headers):
    tagged = submit(manifest(1, labels={"team": "render"}))
    submit(manifest(1, labels={"team": "audio"}))

    response = client.get("/api/v1/jobs?label=team=render", headers=headers["user"])

    assert response.status_code == 200
    assert [j["id"] for j in response.get_json()["jobs"]] == [tagged["id"]]
    assert response.get_json()["jobs"][0]["labels"] == {"team": "render"}


def test_the_job_list_filters_by_workload_with_the_other_filters(submit, client, headers):
    render = submit(manifest(1, workload="render", labels={"team": "a"}))
    submit(manifest(1, workload="render", labels={"team": "b"}))
    echo = submit(manifest(1, labels={"team": "a"}))

    def listed(**query: str) -> list[str]:
        response = client.get("/api/v1/jobs", query_string=query, headers=headers["user"])
        assert response.status_code == 200, query
        return [j["id"] for j in response.get_json()["jobs"]]

    assert listed(workload="echo") == [echo["id"]]
    assert listed(workload="render", label="team=a") == [render["id"]]
    assert listed(workload="csv_stats") == []


def test_a_label_filter_drops_the_spaces_around_its_key_and_value(submit, client, headers):
    tagged = submit(manifest(1, labels={"team": "render"}))

    response = client.get(
        "/api/v1/jobs", query_string={"label": " team = render "}, headers=headers["user"]
    )

    assert [j["id"] for j in response.get_json()["jobs"]] == [tagged["id"]]


# --- results ----------------------------------------------------------------------------------


def test_results_come_back_in_chunk_order_whatever_the_order_of_completion(
    rt, user, submit, claim, task_call, client, headers
):
    shuffle = random.Random(20240601)
    indexes = shuffle.sample(range(100), 8)
    job = submit(manifest(indexes))
    # Four workers at the per-worker cap hold all eight at once, so any completion order works.
    leased = [(w, t) for w in ("w1", "w2", "w3", "w4") for t in claim(w, capacity=2)]
    assert len(leased) == 8
    shuffle.shuffle(leased)
    for worker, task in leased:
        assert task_call(task["task_id"], "result", result_body(task, worker)).status_code == 200

    response = client.get(f"/api/v1/jobs/{job['id']}/results", headers=headers["user"])

    assert response.status_code == 200
    results = response.get_json()["results"]
    assert [r["chunk_index"] for r in results] == sorted(indexes)
    by_task = {t["task_id"]: result_body(t, w) for w, t in leased}
    for r in results:
        assert r["result_uri"] == by_task[r["task_id"]]["result_uri"]
        assert r["result_sha256"] == by_task[r["task_id"]]["result_sha256"]
        assert r["attempt"] == 1
    service_order = task_values.list_completed_results(rt, user, uuid.UUID(job["id"]))
    assert [t.chunk_index for t in service_order.results] == sorted(indexes)


def test_results_list_only_the_completed_chunks(submit, claim, complete, client, headers):
    job = submit(manifest([5, 1, 3]))
    [first, _still_running] = claim(WORKER, capacity=2)
    complete(first)

    results = client.get(f"/api/v1/jobs/{job['id']}/results", headers=headers["user"]).get_json()[
        "results"
    ]

    assert [r["chunk_index"] for r in results] == [1]


def test_results_come_a_page_at_a_time_skipping_unfinished_chunks(
    submit, claim, complete, client, headers
):
    job = submit(manifest(5))
    leased = claim(WORKER, capacity=5)
    for task in leased:
        if task["chunk_index"] != 1:
            complete(task)
    url = f"/api/v1/jobs/{job['id']}/results"

    first = client.get(url, query_string={"limit": 2}, headers=headers["user"]).get_json()
    after = first["next_after"]
    second = client.get(url, query_string={"after": after, "limit": 2}, headers=headers["user"])
    last = client.get(url, query_string={"after": 4}, headers=headers["user"]).get_json()

    assert [r["chunk_index"] for r in first["results"]] == [0, 2]
    assert [r["chunk_index"] for r in second.get_json()["results"]] == [3, 4]
    # A full page may have more after it; the short (here empty) last one says there is none.
    assert second.get_json()["next_after"] == 4
    assert (last["results"], last["next_after"]) == ([], None)


# --- cancel and retry -------------------------------------------------------------------------


def test_cancelling_a_job_cancels_its_tasks_and_fences_off_the_running_one(
    submit, claim, task_call, client, headers, db
):
    job = submit(manifest(3))
    [running] = claim(WORKER)

    response = client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=headers["user"])

    assert response.status_code == 200
    assert response.get_json()["status"] == "cancelled"
    assert response.get_json()["chunks_by_state"]["cancelled"] == 3
    statuses = db.execute("SELECT status FROM tasks WHERE job_id = %s", (job["id"],)).fetchall()
    assert {r["status"] for r in statuses} == {"cancelled"}
    heartbeat = task_call(
        running["task_id"],
        "heartbeat",
        {"worker_id": WORKER, "attempt": running["attempt"], "lease_token": running["lease_token"]},
    )
    assert heartbeat.status_code == 409
    assert heartbeat.get_json()["error"]["code"] == "task_cancelled"
    result = task_call(running["task_id"], "result", result_body(running))
    assert result.status_code == 409
    assert result.get_json()["error"]["code"] == "task_cancelled"
    assert claim(OTHER_WORKER) == []


def test_cancelling_a_cancelled_job_again_is_a_200_no_op(submit, client, headers, db):
    job = submit(manifest(2))
    first = client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=headers["user"])

    again = client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=headers["user"])

    assert again.status_code == 200
    assert again.get_json()["status"] == "cancelled"
    assert again.get_json()["revision"] == first.get_json()["revision"]
    events = db.execute(
        "SELECT count(*) AS n FROM outbox WHERE event = 'job.cancelled'"
    ).fetchone()["n"]
    assert events == 1


def test_cancelling_a_succeeded_job_is_409(submit, claim, complete, client, headers):
    job = submit(manifest(1))
    complete(claim(WORKER)[0])

    response = client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=headers["user"])

    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "not_cancellable"
    status = client.get(f"/api/v1/jobs/{job['id']}", headers=headers["user"]).get_json()
    assert status["status"] == "succeeded"


def test_retrying_a_failed_job_requeues_its_chunks_under_a_new_attempt(
    submit, claim, task_call, complete, client, headers
):
    job = submit(manifest(2))
    [doomed] = claim(WORKER)
    task_call(
        doomed["task_id"],
        "failure",
        {
            "worker_id": WORKER,
            "attempt": 1,
            "lease_token": doomed["lease_token"],
            "error_code": "oom",
            "retryable": False,
        },
    )

    response = client.post(f"/api/v1/jobs/{job['id']}/retry", headers=headers["user"])

    assert response.status_code == 200
    assert response.get_json()["status"] == "queued"  # no chunk of it is done
    again = claim(WORKER, capacity=2)
    assert {(t["chunk_index"], t["attempt"]) for t in again} == {(0, 2), (1, 1)}
    for task in again:
        complete(task)
    status = client.get(f"/api/v1/jobs/{job['id']}", headers=headers["user"]).get_json()
    assert status["status"] == "succeeded"


def test_a_retry_grants_each_task_the_jobs_own_attempts_not_the_default(
    submit, claim, task_call, client, headers
):
    job = submit(manifest(1, max_attempts=1))
    timeout = {"worker_id": WORKER, "error_code": "timeout", "retryable": True}
    [first] = claim(WORKER)
    task_call(
        first["task_id"], "failure", {**timeout, "attempt": 1, "lease_token": first["lease_token"]}
    )
    client.post(f"/api/v1/jobs/{job['id']}/retry", headers=headers["user"])

    [second] = claim(WORKER)
    lease = {"attempt": 2, "lease_token": second["lease_token"]}
    response = task_call(second["task_id"], "failure", {**timeout, **lease})

    assert response.get_json()["status"] == "failed"
    status = client.get(f"/api/v1/jobs/{job['id']}", headers=headers["user"]).get_json()
    assert (status["status"], status["max_attempts"]) == ("failed", 1)


def test_a_retry_grants_a_job_admitted_before_budgets_were_kept_the_configured_attempts(
    submit, claim, task_call, client, headers, db, rt
):
    job = submit(manifest(1, max_attempts=1))
    db.execute("UPDATE jobs SET max_attempts = NULL WHERE id = %s", (job["id"],))
    [leased] = claim(WORKER)
    task_call(
        leased["task_id"],
        "failure",
        {
            "worker_id": WORKER,
            "attempt": 1,
            "lease_token": leased["lease_token"],
            "error_code": "timeout",
            "retryable": True,
        },
    )

    client.post(f"/api/v1/jobs/{job['id']}/retry", headers=headers["user"])

    budget = db.execute("SELECT max_attempts - attempt AS n FROM tasks").fetchone()["n"]
    assert budget == rt.limits.max_attempts


def test_retrying_a_job_that_has_not_failed_is_409(submit, client, headers):
    job = submit(manifest(1))

    response = client.post(f"/api/v1/jobs/{job['id']}/retry", headers=headers["user"])

    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "not_failed"
