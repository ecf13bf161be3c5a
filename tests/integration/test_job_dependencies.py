"""Job dependencies: a manifest job's tasks wait until every job it names has succeeded, and it
fails when one of them fails or is cancelled; nothing is written for a job that names a job it
cannot wait for."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from psycopg.errors import DeadlockDetected

from services import jobs
from tests.integration.csv_worker import upload
from tests.integration.manifests import WORKER, manifest, result_body


@pytest.fixture
def view(client, headers):
    """GET a job as the user."""

    def get(job: dict) -> dict:
        return client.get(f"/api/v1/jobs/{job['id']}", headers=headers["user"]).get_json()

    return get


@pytest.fixture
def fail(task_call):
    """Fail a claimed task for good."""

    def fail_for_good(claimed: dict) -> None:
        body = {
            "worker_id": WORKER,
            "attempt": claimed["attempt"],
            "lease_token": claimed["lease_token"],
            "error_code": "boom",
        }
        answer = task_call(claimed["task_id"], "failure", {**body, "retryable": False})
        assert answer.status_code == 200, answer.get_json()

    return fail_for_good


def after(*jobs: dict, tasks: int = 1, **extra) -> dict:
    """A manifest job depending on these jobs."""
    return manifest(tasks, depends_on=[j["id"] for j in jobs], **extra)


def job_ids(tasks: list[dict]) -> set[str]:
    return {t["job_id"] for t in tasks}


def test_a_dependent_jobs_tasks_wait_until_its_prerequisite_succeeds(
    submit, claim, complete, view, client, headers
):
    first = submit(manifest(1))
    then = submit(after(first, tasks=2))

    [task] = claim(capacity=10)
    assert task["job_id"] == first["id"]
    assert claim(capacity=10) == []
    complete(task)

    released = claim(capacity=10)
    assert job_ids(released) == {then["id"]} and len(released) == 2
    assert then["depends_on"] == [first["id"]] and then["status"] == "queued"
    assert view(first)["depends_on"] == []
    feed = f"/api/v1/events?type=job.created&job_id={then['id']}"
    [created] = client.get(feed, headers=headers["user"]).get_json()["events"]
    assert created["payload"]["depends_on"] == [first["id"]]


def test_a_job_waits_for_every_job_it_depends_on(submit, claim, complete):
    a, b = submit(manifest(1)), submit(manifest(1))
    joined = submit(after(a, b))
    tasks = {t["job_id"]: t for t in claim(capacity=10)}

    complete(tasks[a["id"]])
    assert claim(capacity=10) == []
    complete(tasks[b["id"]])

    assert job_ids(claim(capacity=10)) == {joined["id"]}


def test_a_job_whose_prerequisites_have_already_succeeded_runs_at_once(submit, claim, complete):
    first = submit(manifest(1))
    complete(claim()[0])

    then = submit(after(first))

    assert job_ids(claim()) == {then["id"]}


def test_a_failed_prerequisite_fails_its_dependents_and_theirs(
    submit, claim, fail, view, client, headers
):
    first = submit(manifest(1))
    second = submit(after(first, tasks=3))
    third = submit(after(second))

    fail(claim()[0])

    for job, cause in ((second, first), (third, second)):
        failed = view(job)
        assert failed["status"] == "failed"
        assert failed["error"]["code"] == "dependency_failed"
        assert failed["error"]["details"] == {"job_id": cause["id"], "status": "failed"}
        assert failed["chunks_by_state"]["cancelled"] == failed["chunks_total"]
    assert claim(capacity=10) == []
    events = client.get("/api/v1/events?type=job.failed", headers=headers["user"]).get_json()
    assert [e["job_id"] for e in events["events"]] == [first["id"], second["id"], third["id"]]


def test_a_failure_at_the_head_of_a_long_pipeline_fails_every_step(submit, claim, fail, db):
    steps = [submit(manifest(1))]
    for _ in range(600):  # deeper than a recursion of two frames a step could go
        steps.append(submit(after(steps[-1])))

    fail(claim()[0])

    failed = db.execute(
        "SELECT count(*) AS n FROM jobs WHERE status = 'failed' AND error->>'code' = %s",
        ("dependency_failed",),
    ).fetchone()["n"]
    assert failed == 600


def test_a_failure_fails_a_wide_fan_out_and_the_job_that_joins_it(
    submit, claim, fail, client, headers, view
):
    first = submit(manifest(1))
    branches = [submit(after(first)) for _ in range(200)]
    joined = submit(after(*branches[:100]))

    fail(claim()[0])

    statuses = {view(job)["status"] for job in branches}
    error = view(joined)["error"]
    assert statuses == {"failed"}
    assert error["code"] == "dependency_failed"
    assert error["details"]["job_id"] in {b["id"] for b in branches[:100]}
    feed = "/api/v1/events?type=job.failed&limit=1000"
    events = client.get(feed, headers=headers["user"]).get_json()["events"]
    assert len(events) == len({e["job_id"] for e in events}) == 202


def test_cancelling_a_prerequisite_fails_the_jobs_that_wait_for_it(submit, client, headers, view):
    first = submit(manifest(1))
    then = submit(after(first))

    client.post(f"/api/v1/jobs/{first['id']}/cancel", headers=headers["user"])

    failed = view(then)
    assert failed["status"] == "failed"
    assert failed["error"]["message"] == f"job {first['id']}, which it depends on, was cancelled"


def test_a_cancelled_dependent_is_left_alone_when_its_prerequisite_succeeds(
    submit, claim, complete, client, headers, view
):
    first = submit(manifest(1))
    then = submit(after(first))
    client.post(f"/api/v1/jobs/{then['id']}/cancel", headers=headers["user"])

    complete(claim()[0])

    assert view(then)["status"] == "cancelled" and claim() == []


@pytest.mark.parametrize("ending", ["failed", "cancelled"])
def test_depending_on_a_failed_or_cancelled_job_is_409_and_writes_nothing(
    ending, submit, claim, fail, client, headers, db
):
    first = submit(manifest(1))
    if ending == "failed":
        fail(claim()[0])
    else:
        client.post(f"/api/v1/jobs/{first['id']}/cancel", headers=headers["user"])

    answer = client.post("/api/v1/jobs", json=after(first), headers=headers["user"])

    assert answer.status_code == 409
    error = answer.get_json()["error"]
    assert (error["code"], error["details"]) == (
        "dependency_failed",
        {"job_id": first["id"], "status": ending},
    )
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 1


def test_a_dependent_job_whose_admission_a_deadlock_ended_is_admitted_once_on_its_next_run(
    submit, client, headers, db, monkeypatch
):
    first = submit(manifest(1))
    runs: list[int] = []
    real_waits_for = jobs.dependencies.waits_for

    def waits_for(conn, principal, ids):
        runs.append(1)
        if len(runs) == 1:  # the victim: PostgreSQL rolled its transaction back
            raise DeadlockDetected("deadlock detected")
        return real_waits_for(conn, principal, ids)

    monkeypatch.setattr(jobs.dependencies, "waits_for", waits_for)
    answer = client.post("/api/v1/jobs", json=after(first), headers=headers["user"])

    assert (answer.status_code, len(runs)) == (201, 2)
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 2


def test_depending_on_a_job_that_is_not_the_callers_or_none_is_422_naming_each(
    submit, client, headers, db
):
    mine = submit(manifest(1))
    theirs = submit(manifest(1), as_="other")
    body = manifest(1, depends_on=[mine["id"], theirs["id"], str(uuid.uuid4())])

    answer = client.post("/api/v1/jobs", json=body, headers=headers["user"])

    assert answer.status_code == 422
    fields = answer.get_json()["error"]["details"]["fields"]["depends_on"]
    assert fields == {"1": ["no job of yours has this id"], "2": ["no job of yours has this id"]}
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 2


def test_an_operator_may_make_a_job_wait_for_anyones(submit, claim, complete):
    theirs = submit(manifest(1))

    then = submit(after(theirs), as_="operator")

    complete(claim()[0])
    assert job_ids(claim()) == {then["id"]}


@pytest.mark.parametrize(
    ("depends_on", "field", "message"),
    [
        (["not-a-uuid"], "0", "Not a valid UUID."),
        (["6f1c1a1e-0000-4000-8000-000000000000"] * 2, "1", "this job is named twice"),
        ([str(uuid.uuid4()) for _ in range(101)], None, "at most 100 jobs"),
    ],
    ids=["not an id", "named twice", "too many"],
)
def test_a_bad_depends_on_is_422_naming_it_and_writes_nothing(
    depends_on, field, message, client, headers, db
):
    answer = client.post(
        "/api/v1/jobs", json=manifest(1, depends_on=depends_on), headers=headers["user"]
    )

    assert answer.status_code == 422
    fields = answer.get_json()["error"]["details"]["fields"]["depends_on"]
    assert (fields[field] if field else fields) == [message]
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def test_retrying_a_dependent_waits_for_its_prerequisite_to_be_retried_first(
    submit, claim, fail, client, headers
):
    first = submit(manifest(1))
    then = submit(after(first))
    fail(claim()[0])

    too_soon = client.post(f"/api/v1/jobs/{then['id']}/retry", headers=headers["user"])

    assert too_soon.status_code == 409
    error = too_soon.get_json()["error"]
    assert (error["code"], error["details"]) == (
        "dependency_failed",
        {"job_id": first["id"], "status": "failed"},
    )


def test_retrying_a_prerequisite_lets_the_jobs_its_failure_failed_wait_for_it_again(
    submit, claim, fail, complete, client, headers, view, db
):
    first = submit(manifest(1))
    second = submit(after(first, tasks=2))
    third = submit(after(second))
    fail(claim()[0])

    retried = client.post(f"/api/v1/jobs/{first['id']}/retry", headers=headers["user"])

    assert retried.status_code == 200
    for job in (second, third):
        again = view(job)
        assert (again["status"], again["error"]) == ("queued", None)
        assert again["chunks_by_state"]["pending"] == again["chunks_total"]
    assert still_waiting(db, [second, third]) == 3
    feed = client.get("/api/v1/events?type=job.retried", headers=headers["user"]).get_json()
    retried_with = {e["job_id"]: e["payload"].get("retried_with") for e in feed["events"]}
    assert retried_with == {first["id"]: None, second["id"]: first["id"], third["id"]: first["id"]}
    for job, tasks in ((first, 1), (second, 2), (third, 1)):
        leased = claim(capacity=10)
        assert job_ids(leased) == {job["id"]} and len(leased) == tasks
        for task in leased:
            complete(task)
    assert view(third)["status"] == "succeeded"


def test_a_dependent_that_also_waits_for_another_failed_job_stays_failed_until_that_is_retried(
    submit, claim, fail, complete, client, headers, view
):
    a, b = submit(manifest(1)), submit(manifest(1))
    joined = submit(after(a, b))
    beyond = submit(after(joined))
    tasks = {t["job_id"]: t for t in claim(capacity=2)}
    fail(tasks[a["id"]])
    fail(tasks[b["id"]])

    client.post(f"/api/v1/jobs/{a['id']}/retry", headers=headers["user"])
    kept = [view(joined)["status"], view(beyond)["status"]]
    client.post(f"/api/v1/jobs/{b['id']}/retry", headers=headers["user"])

    assert kept == ["failed", "failed"]
    assert [view(joined)["status"], view(beyond)["status"]] == ["queued", "queued"]
    for task in claim(capacity=10):
        complete(task)
    assert job_ids(claim(capacity=10)) == {joined["id"]}


def test_a_retry_brings_back_a_job_that_waits_for_it_both_directly_and_through_another(
    submit, claim, fail, client, headers, view
):
    first = submit(manifest(1))
    middle = submit(after(first))
    last = submit(after(first, middle))
    fail(claim()[0])

    client.post(f"/api/v1/jobs/{first['id']}/retry", headers=headers["user"])

    assert [view(middle)["status"], view(last)["status"]] == ["queued", "queued"]


def test_a_retry_brings_back_an_operators_job_that_waited_for_the_users(
    submit, claim, fail, client, headers
):
    theirs = submit(manifest(1))
    mine = submit(after(theirs), as_="operator")
    fail(claim()[0])

    client.post(f"/api/v1/jobs/{theirs['id']}/retry", headers=headers["user"])

    status = client.get(f"/api/v1/jobs/{mine['id']}", headers=headers["operator"]).get_json()
    assert status["status"] == "queued"


def test_the_job_list_pages_through_the_jobs_waiting_for_a_job_the_caller_may_see(
    submit, client, headers
):
    first, other = submit(manifest(1)), submit(manifest(1))
    waiting = [submit(after(first)), submit(after(other, first)), submit(after(first))]
    only_other = submit(after(other))
    theirs = submit(after(first), as_="operator")

    def listed(as_: str, **query) -> dict:
        query = {"depends_on": first["id"], **query}
        return client.get("/api/v1/jobs", query_string=query, headers=headers[as_]).get_json()

    pages = [listed("user", limit=2)]
    pages.append(listed("user", limit=2, cursor=pages[0]["next_cursor"]))

    newest_first = [job["id"] for job in reversed(waiting)]
    assert [[j["id"] for j in page["jobs"]] for page in pages] == [
        newest_first[:2],
        newest_first[2:],
    ]
    assert pages[1]["next_cursor"] is None
    assert [j["id"] for j in listed("operator")["jobs"]] == [theirs["id"], *newest_first]
    assert listed("other")["jobs"] == []
    by_other = listed("user", depends_on=other["id"])["jobs"]
    assert [j["id"] for j in by_other] == [only_other["id"], waiting[1]["id"]]


def test_a_dependent_that_is_also_scheduled_waits_for_both(submit, claim, complete, db):
    first = submit(manifest(1))
    later = datetime.now(UTC) + timedelta(hours=1)
    then = submit(after(first, not_before=later.isoformat()))

    complete(claim()[0])

    assert claim() == []
    row = db.execute("SELECT not_before FROM tasks WHERE job_id = %s", (then["id"],)).fetchone()
    assert row["not_before"] == later


def test_a_waiting_jobs_chunks_show_no_start_time_and_count_as_waiting(submit, client, headers):
    first = submit(manifest(1))
    then = submit(after(first, tasks=2))

    chunks = client.get(f"/api/v1/jobs/{then['id']}/chunks", headers=headers["user"]).get_json()
    queue = client.get("/api/v1/queue", headers=headers["operator"]).get_json()

    assert [c["not_before"] for c in chunks["chunks"]] == [None, None]
    assert queue["waiting"] == {"echo": 2}


def test_an_idempotent_replay_returns_the_dependent_job_even_after_its_prerequisite_failed(
    submit, claim, fail, client, headers
):
    first = submit(manifest(1))
    keyed = {**headers["user"], "Idempotency-Key": "after-first"}
    created = client.post("/api/v1/jobs", json=after(first), headers=keyed)
    fail(claim()[0])

    replayed = client.post("/api/v1/jobs", json=after(first), headers=keyed)
    changed = client.post("/api/v1/jobs", json=manifest(1), headers=keyed)

    assert (created.status_code, replayed.status_code) == (201, 200)
    assert replayed.get_json()["id"] == created.get_json()["id"]
    assert changed.status_code == 409  # the same key without depends_on is another request


def test_a_manifest_job_may_wait_for_a_csv_job(client, headers, worker, submit, claim):
    csv_job = upload(client, headers["user"], b"value\n1\n2\n3\n", chunks=1).get_json()
    then = submit(after(csv_job))
    assert claim() == []

    worker.drain()

    assert job_ids(claim()) == {then["id"]}


def test_a_schedules_job_may_not_depend_on_jobs(submit, client, headers, db):
    first = submit(manifest(1))
    body = {"cron": "@daily", "job": after(first)}

    answer = client.put("/api/v1/schedules/nightly", json=body, headers=headers["user"])

    assert answer.status_code == 422
    assert answer.get_json()["error"]["details"]["fields"] == {
        "job": {"depends_on": ["a schedule's runs depend on no job"]}
    }
    assert db.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"] == 0


def at_once(*calls: Callable[[], int]) -> list[int]:
    """Run the calls in threads released together; what each returned, in order."""
    start = threading.Barrier(len(calls))
    results: list[int] = [0] * len(calls)

    def run(index: int, call: Callable[[], int]) -> None:
        start.wait()
        results[index] = call()

    threads = [threading.Thread(target=run, args=pair) for pair in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def posting(app, path: str, headers: dict, body: dict | None = None) -> Callable[[], int]:
    """A POST to make later, on a test client of its own (one per thread); its status."""
    return lambda: app.test_client().post(path, json=body, headers=headers).status_code


def result_of(app, headers: dict, task: dict) -> Callable[[], int]:
    """The worker's result for a leased task, to post later."""
    path = f"/api/v1/tasks/{task['task_id']}/result"
    return posting(app, path, headers["worker"], result_body(task))


def still_waiting(db, jobs: list[dict]) -> int:
    """How many of these jobs' tasks still wait (for prerequisites, or a time)."""
    ids = [uuid.UUID(job["id"]) for job in jobs]
    return db.execute(
        "SELECT count(*) AS n FROM tasks WHERE job_id = ANY(%s) AND not_before IS NOT NULL",
        (ids,),
    ).fetchone()["n"]


def joined_pairs(submit, rounds: int) -> list[tuple[dict, dict, dict]]:
    """`rounds` pairs of one-task jobs, each with a job that depends on both."""
    made = []
    for _ in range(rounds):
        a, b = submit(manifest(1)), submit(manifest(1))
        made.append((a, b, submit(after(a, b))))
    return made


def test_prerequisites_finishing_at_once_never_leave_their_dependent_waiting(
    app, submit, claim, headers, db
):
    rounds = 15
    pairs = joined_pairs(submit, rounds)
    leased = {t["job_id"]: t for t in claim(capacity=2 * rounds)}
    answers = []

    for a, b, _ in pairs:
        answers += at_once(
            result_of(app, headers, leased[a["id"]]), result_of(app, headers, leased[b["id"]])
        )

    dependents = [d for _, _, d in pairs]
    assert answers == [200] * (2 * rounds)
    assert still_waiting(db, dependents) == 0
    assert job_ids(claim(capacity=2 * rounds)) == {d["id"] for d in dependents}


def failure_of(app, headers: dict, task: dict) -> Callable[[], int]:
    """The worker's failure for good of a leased task, to post later."""
    path = f"/api/v1/tasks/{task['task_id']}/failure"
    body = {
        "worker_id": WORKER,
        "attempt": task["attempt"],
        "lease_token": task["lease_token"],
        "error_code": "boom",
    }
    return posting(app, path, headers["worker"], {**body, "retryable": False})


def test_a_dependent_retried_as_its_prerequisite_succeeds_never_waits_for_good(
    app, rt, submit, claim, fail, client, headers, db
):
    # A dependent is retried by hand while a prerequisite runs when the other job its failure
    # named has since been deleted by retention: a deleted prerequisite counts as done.
    rounds = 40
    trios = joined_pairs(submit, rounds)
    for task in claim(capacity=2 * rounds):
        fail(task)  # each dependent fails with the first of its two prerequisites to fail
    for first, _, _ in trios:  # the dependents stay failed: `gone` failed too
        client.post(f"/api/v1/jobs/{first['id']}/retry", headers=headers["user"])
    gone_ids = [uuid.UUID(gone["id"]) for _, gone, _ in trios]
    db.execute(
        "UPDATE jobs SET completed_at = now() - interval '8 days' WHERE id = ANY(%s)", (gone_ids,)
    )
    assert jobs.delete_expired_history(replace(rt, limits=replace(rt.limits, retention_days=7)))
    leased = {t["job_id"]: t for t in claim(capacity=rounds)}
    answers = []

    for first, _, then in trios:
        answers += at_once(
            result_of(app, headers, leased[first["id"]]),
            posting(app, f"/api/v1/jobs/{then['id']}/retry", headers["user"]),
        )

    dependents = [then for _, _, then in trios]
    assert answers == [200] * (2 * rounds)
    assert still_waiting(db, dependents) == 0
    assert job_ids(claim(capacity=rounds)) == {then["id"] for then in dependents}


def test_a_dependent_brought_back_as_its_other_prerequisite_fails_is_failed_again(
    app, submit, claim, fail, headers, db
):
    rounds = 40
    trios = joined_pairs(submit, rounds)
    leased = {t["job_id"]: t for t in claim(capacity=2 * rounds)}
    for first, _, _ in trios:
        fail(leased[first["id"]])  # and the dependent with it
    answers = []

    for first, other, _ in trios:
        answers += at_once(
            posting(app, f"/api/v1/jobs/{first['id']}/retry", headers["user"]),
            failure_of(app, headers, leased[other["id"]]),
        )

    dependents = [uuid.UUID(then["id"]) for _, _, then in trios]
    assert answers == [200] * (2 * rounds)
    failed = db.execute(
        "SELECT count(*) AS n FROM jobs WHERE id = ANY(%s) AND status = 'failed'", (dependents,)
    ).fetchone()["n"]
    pending = db.execute(
        "SELECT count(*) AS n FROM tasks WHERE job_id = ANY(%s) AND status = 'pending'",
        (dependents,),
    ).fetchone()["n"]
    assert (failed, pending) == (rounds, 0)
