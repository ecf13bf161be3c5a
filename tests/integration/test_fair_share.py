"""Fair share between users: per-user quotas at admission, and claims that interleave owners."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from devstack.sample_csv import generate_csv
from services import schedules
from tests.integration.csv_worker import files_under, row_counts, settings, submit, upload
from tests.integration.manifests import manifest

# A manifest queue of 40 with a quarter each: a user may hold 10 unfinished tasks.
SHARE = {
    "CHUNKWISE_MANIFEST_MAX_QUEUED_TASKS": "40",
    "CHUNKWISE_MANIFEST_MAX_TASKS_PER_JOB": "40",
    "CHUNKWISE_USER_MAX_QUEUED_PERCENT": "25",
}


def post(client, headers, body: dict):
    """POST a manifest job and return the response."""
    return client.post("/api/v1/jobs", json=body, headers=headers)


@settings(**SHARE)
def test_a_job_past_its_owners_share_is_429_naming_the_limit_and_writes_nothing(
    client, headers, db
):
    assert post(client, headers["user"], manifest(8)).status_code == 201
    before = row_counts(db)

    refused = post(client, headers["user"], manifest(3))

    assert refused.status_code == 429
    assert refused.headers["Retry-After"].isdigit()
    error = refused.get_json()["error"]
    assert error["code"] == "user_quota_exceeded"
    assert error["details"] == {
        "workload": "echo",
        "limit": 10,
        "queued_chunks": 8,
        "requested_chunks": 3,
    }
    assert "CHUNKWISE_USER_MAX_QUEUED_PERCENT" in error["message"]
    assert row_counts(db) == before


@settings(**SHARE)
def test_one_users_full_share_leaves_room_for_another(client, headers):
    assert post(client, headers["user"], manifest(10)).status_code == 201
    assert post(client, headers["user"], manifest(1)).status_code == 429

    assert post(client, headers["other"], manifest(10)).status_code == 201


@settings(**SHARE)
def test_a_job_larger_than_a_users_share_is_422(client, headers, db):
    refused = post(client, headers["user"], manifest(11))

    assert refused.status_code == 422
    assert refused.get_json()["error"]["details"]["fields"] == {
        "tasks": ["a job may have at most 10 tasks"]
    }
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


@settings(**SHARE)
def test_a_share_is_given_back_when_the_owners_tasks_finish(client, headers):
    first = post(client, headers["user"], manifest(10)).get_json()
    assert post(client, headers["user"], manifest(5)).status_code == 429

    client.post(f"/api/v1/jobs/{first['id']}/cancel", headers=headers["user"])

    assert post(client, headers["user"], manifest(10)).status_code == 201


@settings(**SHARE)
def test_racing_submitters_never_take_a_user_past_their_share(client, headers, db):
    start = threading.Barrier(8)
    codes: list[int] = []

    def submit_three() -> None:
        start.wait()
        codes.append(post(client, headers["user"], manifest(3)).status_code)

    threads = [threading.Thread(target=submit_three) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sorted(codes) == [201] * 3 + [429] * 5
    assert db.execute("SELECT count(*) AS n FROM tasks").fetchone()["n"] == 9


@settings(**SHARE)
def test_a_retried_jobs_tasks_count_towards_its_owners_share(client, headers, db):
    failed = post(client, headers["user"], manifest(8)).get_json()
    db.execute(
        "UPDATE tasks SET status = 'failed', error_code = 'boom' WHERE job_id = %s",
        (failed["id"],),
    )
    db.execute("UPDATE jobs SET status = 'failed' WHERE id = %s", (failed["id"],))
    # A refusal counts the owner's tasks again (none unfinished), then admits this job.
    assert post(client, headers["user"], manifest(5)).status_code == 201

    retried = client.post(f"/api/v1/jobs/{failed['id']}/retry", headers=headers["user"])
    assert retried.status_code == 200, retried.get_json()

    # 13 unfinished now: the bound must know of the 8 the retry put back.
    assert post(client, headers["user"], manifest(1)).status_code == 429


@settings(
    CHUNKWISE_MAX_QUEUED_CHUNKS="8",
    CHUNKWISE_USER_MAX_QUEUED_PERCENT="50",
)
def test_a_csv_job_past_its_owners_share_is_429_and_leaves_no_file(
    client, headers, db, archive_dir, temp_dir
):
    submit(client, headers["user"], generate_csv(40, seed=1), chunks=4)
    before, archived = row_counts(db), files_under(archive_dir)

    refused = upload(client, headers["user"], generate_csv(40, seed=2), chunks=2)

    assert refused.status_code == 429
    assert refused.headers["Retry-After"].isdigit()
    error = refused.get_json()["error"]
    assert error["code"] == "user_quota_exceeded"
    assert error["details"]["limit"] == 4 and error["details"]["workload"] == "csv_stats"
    assert row_counts(db) == before
    assert files_under(archive_dir) == archived
    assert files_under(temp_dir) == []
    # The queue itself had room: another user's job is admitted.
    submit(client, headers["other"], generate_csv(40, seed=3), chunks=4)


@settings(CHUNKWISE_USER_MAX_STORED_BYTES="2048")
def test_parameters_past_a_users_stored_bytes_are_429_and_write_nothing(client, headers, db):
    big = {"blob": "x" * 1200}
    assert post(client, headers["user"], manifest(1, parameters=big)).status_code == 201
    before = row_counts(db)

    refused = post(client, headers["user"], manifest(1, parameters=big))

    assert refused.status_code == 429
    error = refused.get_json()["error"]
    assert error["code"] == "user_quota_exceeded"
    assert error["details"]["limit_bytes"] == 2048
    assert error["details"]["workload"] == "echo"
    assert "CHUNKWISE_USER_MAX_STORED_BYTES" in error["message"]
    assert row_counts(db) == before


@settings(CHUNKWISE_USER_MAX_STORED_BYTES="2048")
def test_one_job_past_the_stored_bytes_is_422_naming_parameters(client, headers, db):
    refused = post(client, headers["user"], manifest(1, parameters={"blob": "x" * 3000}))

    assert refused.status_code == 422
    assert "parameters" in refused.get_json()["error"]["details"]["fields"]
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


@settings(CHUNKWISE_USER_MAX_SCHEDULES="2")
def test_a_schedule_past_the_users_cap_is_409_naming_the_limit_and_writes_nothing(
    client, headers, db
):
    body = {"cron": "@daily", "job": manifest(1)}
    for name in ("one", "two"):
        assert (
            client.put(f"/api/v1/schedules/{name}", json=body, headers=headers["user"]).status_code
            == 201
        )

    refused = client.put("/api/v1/schedules/three", json=body, headers=headers["user"])

    assert refused.status_code == 409
    error = refused.get_json()["error"]
    assert error["code"] == "schedule_limit" and error["details"] == {"limit": 2}
    assert "CHUNKWISE_USER_MAX_SCHEDULES" in error["message"]
    assert db.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"] == 2


@settings(**SHARE)
def test_a_scheduled_run_past_its_owners_share_waits_and_submits_nothing(rt, client, headers, db):
    assert post(client, headers["user"], manifest(10)).status_code == 201
    body = {"cron": "@daily", "job": manifest(2)}
    assert client.put("/api/v1/schedules/nightly", json=body, headers=headers["user"]).status_code
    db.execute("UPDATE schedules SET next_run_at = now() - interval '1 second'")
    jobs_before = db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"]

    assert schedules.run_due_schedules(rt) == 0

    row = db.execute("SELECT * FROM schedules WHERE name = 'nightly'").fetchone()
    assert row["last_error"]["code"] == "user_quota_exceeded"
    assert row["next_run_at"] < datetime.now(UTC) and row["last_job_id"] is None
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == jobs_before


def leased_owners(claim, claims: int) -> list[str]:
    """Claim one task at a time, `claims` times: each leased task's job's owner, in order."""
    return [t["job_id"] for _ in range(claims) for t in claim(capacity=1)]


def test_a_small_job_behind_another_users_10000_tasks_is_leased_within_21_claims(
    client, headers, claim
):
    backlog = post(client, headers["user"], manifest(10_000)).get_json()
    # The backlog is under way before the small job arrives.
    assert {t["job_id"] for _ in range(5) for t in claim(capacity=1)} == {backlog["id"]}
    small = post(client, headers["other"], manifest(10)).get_json()

    order = leased_owners(claim, 21)

    # One of each, in turn: B's tenth task is the 21st claim at the latest.
    assert order.count(small["id"]) == 10
    assert order.count(backlog["id"]) == 11


def test_one_users_own_jobs_keep_their_order(client, headers, claim):
    first = post(client, headers["user"], manifest(3)).get_json()
    second = post(client, headers["user"], manifest(3)).get_json()

    order = leased_owners(claim, 6)

    assert order == [first["id"]] * 3 + [second["id"]] * 3


def test_a_higher_priority_still_goes_first_whoever_owns_it(client, headers, claim):
    post(client, headers["user"], manifest(3))
    urgent = post(client, headers["other"], manifest(3, priority=5)).get_json()

    assert leased_owners(claim, 3) == [urgent["id"]] * 3


@settings(**SHARE)
def test_a_user_who_cancelled_a_backlog_is_numbered_at_most_their_share_past_the_head(
    client, headers, db
):
    post(client, headers["other"], manifest(10))
    for _ in range(4):
        cancelled = post(client, headers["user"], manifest(10)).get_json()
        client.post(f"/api/v1/jobs/{cancelled['id']}/cancel", headers=headers["user"])
    late = post(client, headers["user"], manifest(1)).get_json()

    tags = db.execute(
        "SELECT (SELECT fair_tag FROM tasks WHERE job_id = %s) AS late,"
        " (SELECT min(fair_tag) FROM tasks WHERE status = 'pending') AS head",
        (late["id"],),
    ).fetchone()

    # Its cancelled 40 took numbers up to 40 past the head; its share is 10. Another user
    # refilling the queue would otherwise be served 40 tasks before this one, not 10.
    assert tags["late"] <= tags["head"] + 10 + 1


def test_a_retried_job_rejoins_its_owners_line_behind_others_already_waiting(
    client, headers, db, claim
):
    failed = post(client, headers["user"], manifest(5)).get_json()
    db.execute(
        "UPDATE tasks SET status = 'failed', error_code = 'boom' WHERE job_id = %s",
        (failed["id"],),
    )
    db.execute("UPDATE jobs SET status = 'failed' WHERE id = %s", (failed["id"],))
    waiting = post(client, headers["other"], manifest(10)).get_json()

    retried = client.post(f"/api/v1/jobs/{failed['id']}/retry", headers=headers["user"])
    assert retried.status_code == 200, retried.get_json()

    order = leased_owners(claim, 10)

    # Taken in turns from the head on, not all five first on their old numbers.
    assert order[:3] == [waiting["id"], failed["id"], waiting["id"]]
    assert order.count(failed["id"]) == 5
