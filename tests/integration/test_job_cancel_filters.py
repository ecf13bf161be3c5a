"""POST /api/v1/jobs/cancel: every unfinished job a filter matches, a batch at a time."""

from __future__ import annotations

import pytest

from tests.integration.manifests import WORKER, manifest

NUL = "\x00"


@pytest.fixture
def cancel_matching(client, headers):
    """POST /api/v1/jobs/cancel with this body as the user (or `as_`); the response."""

    def post(body: dict, as_: str = "user"):
        return client.post("/api/v1/jobs/cancel", json=body, headers=headers[as_])

    return post


def statuses(db) -> dict[str, str]:
    """Every job's status by id."""
    return {str(r["id"]): r["status"] for r in db.execute("SELECT id, status FROM jobs")}


def test_it_cancels_the_unfinished_jobs_a_label_matches_and_leaves_the_rest(
    submit, claim, complete, cancel_matching, db
):
    batch = [submit(manifest(1, labels={"batch": "bad"})) for _ in range(2)]
    running = submit(manifest(2, labels={"batch": "bad"}))
    claim(WORKER)  # one task of the oldest: it is running
    finished = submit(manifest(1, labels={"batch": "bad"}))
    other = submit(manifest(1, labels={"batch": "good"}))
    for leased in claim(WORKER, capacity=10):
        if leased["job_id"] == finished["id"]:
            complete(leased)

    answer = cancel_matching({"label": "batch=bad"})

    assert answer.status_code == 200
    body = answer.get_json()
    expected = {j["id"] for j in [*batch, running]}
    assert (set(body["cancelled"]), body["count"], body["more"]) == (expected, 3, False)
    after = statuses(db)
    assert {after[i] for i in expected} == {"cancelled"}
    assert (after[finished["id"]], after[other["id"]]) == ("succeeded", "running")


def test_a_limit_cancels_a_batch_and_says_more_remain_until_none_do(submit, cancel_matching):
    for _ in range(3):
        submit(manifest(1, workload="render"))

    first = cancel_matching({"workload": "render", "limit": 2}).get_json()
    second = cancel_matching({"workload": "render", "limit": 2}).get_json()

    assert (first["count"], first["more"]) == (2, True)
    assert (second["count"], second["more"]) == (1, False)
    assert not set(first["cancelled"]) & set(second["cancelled"])


def test_a_status_filter_cancels_only_the_jobs_in_that_status(submit, claim, cancel_matching, db):
    running = submit(manifest(1))
    claim(WORKER)
    queued = submit(manifest(1))

    body = cancel_matching({"status": "queued"}).get_json()

    assert body["cancelled"] == [queued["id"]]
    assert statuses(db)[running["id"]] == "running"


def test_a_user_cancels_only_their_own_jobs(submit, cancel_matching, db):
    mine = submit(manifest(1))
    theirs = submit(manifest(1), as_="other")

    body = cancel_matching({"workload": "echo"}).get_json()

    assert body["cancelled"] == [mine["id"]]
    assert statuses(db)[theirs["id"]] == "queued"
    named = cancel_matching({"owner": "other_user"}).get_json()
    assert named["count"] == 0 and statuses(db)[theirs["id"]] == "queued"


def test_an_operator_cancels_one_owners_matching_jobs(submit, cancel_matching, db):
    mine = submit(manifest(1))
    theirs = submit(manifest(1), as_="other")

    body = cancel_matching({"owner": "other_user"}, as_="operator").get_json()

    assert body["cancelled"] == [theirs["id"]]
    assert statuses(db)[mine["id"]] == "queued"


def test_each_job_is_cancelled_as_one_cancel_would_be_events_dependents_and_all(
    submit, cancel_matching, client, headers, db
):
    first = submit(manifest(1, labels={"run": "7"}))
    waiting = submit(manifest(1, depends_on=[first["id"]]))

    cancel_matching({"label": "run=7"})

    assert statuses(db)[waiting["id"]] == "failed"
    events = db.execute(
        "SELECT event FROM outbox WHERE job_id = %s ORDER BY id", (first["id"],)
    ).fetchall()
    assert [e["event"] for e in events][-1] == "job.cancelled"
    audit = db.execute(
        "SELECT actor FROM audit_log WHERE action = 'job.cancel' AND target = %s", (first["id"],)
    ).fetchall()
    assert [a["actor"] for a in audit] == ["compute_user"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "filter"),
        ({"limit": 5}, "filter"),
        ({"status": "succeeded"}, "status"),
        ({"status": "cancelled"}, "status"),
        ({"label": "no-equals-sign"}, "label"),
        ({"label": f"team={NUL}"}, "label"),
        ({"workload": NUL}, "workload"),
        ({"workload": "w" * 101}, "workload"),
        ({"depends_on": "not-a-job"}, "depends_on"),
        ({"owner": ""}, "owner"),
        ({"workload": "echo", "limit": 0}, "limit"),
        ({"workload": "echo", "limit": 1001}, "limit"),
        ({"workload": "echo", "limit": 1.5}, "limit"),
        ({"workload": "echo", "surprise": 1}, "surprise"),
    ],
)
def test_a_bad_filter_is_422_naming_its_field_and_cancels_nothing(
    body, field, submit, cancel_matching, db
):
    job = submit(manifest(1))

    answer = cancel_matching(body)

    assert answer.status_code == 422
    assert field in answer.get_json()["error"]["details"]["fields"]
    assert statuses(db)[job["id"]] == "queued"


def test_a_body_that_is_not_a_json_object_is_refused_and_cancels_nothing(
    submit, client, headers, db
):
    job = submit(manifest(1))

    answer = client.post(
        "/api/v1/jobs/cancel",
        data="[]",
        headers={**headers["user"], "Content-Type": "application/json"},
    )

    assert answer.status_code == 400
    assert statuses(db)[job["id"]] == "queued"


def test_a_worker_token_cannot_cancel_by_filter(cancel_matching):
    assert cancel_matching({"workload": "echo"}, as_="worker").status_code == 403
