"""Schedules: a manifest job submitted on a cron expression by the maintenance pass, each
run exactly once however many coordinators run passes, and every bad field named."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from app import maintenance
from app.metrics import QueueCollector
from devstack.observe import wait_for
from repositories import schedules as schedule_rows
from services import jobs, schedules
from services.errors import Conflict
from tests.integration.csv_worker import settings
from tests.integration.manifests import manifest

EVERY_5_MINUTES = "*/5 * * * *"
IN_AN_HOUR = (datetime.now(UTC) + timedelta(hours=1)).isoformat()


@pytest.fixture
def put(client, headers):
    """PUT a schedule as the user (or `as_`) and return the response."""

    def put_schedule(name: str, cron: str = EVERY_5_MINUTES, job: dict | None = None, **extra):
        body = {"cron": cron, "job": job if job is not None else manifest(2), **extra}
        return client.put(f"/api/v1/schedules/{name}", json=body, headers=headers["user"])

    return put_schedule


@pytest.fixture
def make_due(db):
    """Move every schedule's next run into the past by `ago`, as the clock would."""

    def due(ago: timedelta = timedelta(seconds=1)) -> None:
        db.execute("UPDATE schedules SET next_run_at = now() - %s", (ago,))

    return due


def jobs_of(client, headers, name: str) -> list[dict]:
    """The jobs a schedule's runs submitted, newest first (by the label every run carries)."""
    answer = client.get(f"/api/v1/jobs?label=schedule={name}", headers=headers["user"])
    return answer.get_json()["jobs"]


def schedule_row(db, name: str) -> dict:
    """The schedules row of this name."""
    return db.execute("SELECT * FROM schedules WHERE name = %s", (name,)).fetchone()


def test_a_schedule_is_created_with_its_next_run_and_sending_it_again_changes_nothing(put):
    created = put("nightly")
    again = put("nightly")

    assert created.status_code == 201 and again.status_code == 200
    next_run = datetime.fromisoformat(created.get_json()["next_run_at"])
    assert next_run.minute % 5 == 0 and next_run.second == 0
    assert timedelta(0) < next_run - datetime.now(UTC) <= timedelta(minutes=5)
    assert again.get_json()["next_run_at"] == created.get_json()["next_run_at"]
    assert created.get_json()["job"]["tasks"][0]["input_uri"] == "s3://in/0"


def test_a_new_cron_moves_the_next_run_and_a_new_job_keeps_it(put):
    first = put("nightly").get_json()

    new_job = put("nightly", job=manifest(3)).get_json()
    new_cron = put("nightly", cron="0 3 * * *").get_json()

    assert new_job["next_run_at"] == first["next_run_at"] and len(new_job["job"]["tasks"]) == 3
    assert datetime.fromisoformat(new_cron["next_run_at"]).hour == 3


def test_a_due_schedule_submits_its_job_once_labelled_with_its_name(
    rt, put, make_due, client, headers, db
):
    put("nightly", job=manifest(2, labels={"team": "data"}, priority=7))
    make_due()

    assert schedules.run_due_schedules(rt) == 1
    assert schedules.run_due_schedules(rt) == 0

    [job] = jobs_of(client, headers, "nightly")
    assert (job["chunks_total"], job["priority"]) == (2, 7)
    assert job["labels"] == {"team": "data", "schedule": "nightly"}
    row = schedule_row(db, "nightly")
    assert str(row["last_job_id"]) == job["id"] and row["last_error"] is None
    assert row["next_run_at"] > datetime.now(UTC)


def test_runs_missed_while_no_coordinator_ran_are_made_up_by_one_run(
    rt, put, make_due, client, headers, db
):
    put("often")
    make_due(timedelta(days=1))

    assert schedules.run_due_schedules(rt) == 1

    assert len(jobs_of(client, headers, "often")) == 1
    assert schedule_row(db, "often")["next_run_at"] > datetime.now(UTC)


def test_a_pass_that_dies_before_its_commit_submits_nothing_twice(
    rt, put, make_due, client, headers, monkeypatch, db
):
    put("nightly")
    make_due()
    record_run = schedule_rows.record_run

    def die(*args, **kwargs):
        raise RuntimeError("the coordinator died here")

    monkeypatch.setattr(schedule_rows, "record_run", die)
    with pytest.raises(RuntimeError):
        schedules.run_due_schedules(rt)
    [submitted] = jobs_of(client, headers, "nightly")
    monkeypatch.setattr(schedule_rows, "record_run", record_run)

    schedules.run_due_schedules(rt)

    assert [j["id"] for j in jobs_of(client, headers, "nightly")] == [submitted["id"]]
    assert str(schedule_row(db, "nightly")["last_job_id"]) == submitted["id"]


def test_passes_run_at_once_by_several_coordinators_submit_each_run_once(
    rt, put, make_due, client, headers
):
    names = [f"s{n}" for n in range(6)]
    for name in names:
        put(name)
    make_due()
    start = threading.Barrier(3)
    counts: list[int] = []

    def coordinator() -> None:
        start.wait()
        counts.append(schedules.run_due_schedules(rt))

    threads = [threading.Thread(target=coordinator) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sum(counts) == 6
    assert [len(jobs_of(client, headers, name)) for name in names] == [1] * 6


@settings(CHUNKWISE_MANIFEST_MAX_QUEUED_TASKS="2", CHUNKWISE_MANIFEST_MAX_TASKS_PER_JOB="2")
def test_a_run_that_finds_the_queue_full_waits_for_room_and_then_runs(
    rt, put, make_due, submit, client, headers, db
):
    blocking = submit(manifest(2))
    put("nightly", job=manifest(1))
    make_due()

    assert schedules.run_due_schedules(rt) == 0
    row = schedule_row(db, "nightly")
    assert row["last_error"]["code"] == "queue_full" and row["next_run_at"] < datetime.now(UTC)
    assert row["last_run_at"] is None  # the run has not happened yet

    client.post(f"/api/v1/jobs/{blocking['id']}/cancel", headers=headers["user"])
    assert schedules.run_due_schedules(rt) == 1
    ran = schedule_row(db, "nightly")
    assert ran["last_error"] is None and ran["last_run_at"] == row["next_run_at"]


def test_a_run_refused_for_good_moves_on_to_the_next_time_and_says_why(rt, put, make_due, db):
    put("nightly")
    make_due()
    db.execute("UPDATE schedules SET job = jsonb_set(job, '{workload}', '\"gone\"')")

    assert schedules.run_due_schedules(rt) == 0

    row = schedule_row(db, "nightly")
    assert row["last_error"]["code"] == "invalid_input" and "gone" in row["last_error"]["message"]
    assert row["next_run_at"] > datetime.now(UTC) and row["last_job_id"] is None


def test_a_paused_schedule_does_not_run_and_resumes_from_now(rt, put, make_due, db):
    put("nightly", paused=True)
    make_due(timedelta(hours=2))

    assert schedules.run_due_schedules(rt) == 0
    resumed = put("nightly", paused=False).get_json()

    assert datetime.fromisoformat(resumed["next_run_at"]) > datetime.now(UTC)
    assert resumed["paused"] is False


def test_deleting_a_schedule_stops_its_runs_and_keeps_its_jobs(rt, put, make_due, client, headers):
    put("nightly")
    make_due()
    schedules.run_due_schedules(rt)

    deleted = client.delete("/api/v1/schedules/nightly", headers=headers["user"])

    assert deleted.status_code == 204 and deleted.data == b""
    assert client.get("/api/v1/schedules/nightly", headers=headers["user"]).status_code == 404
    assert client.delete("/api/v1/schedules/nightly", headers=headers["user"]).status_code == 404
    assert len(jobs_of(client, headers, "nightly")) == 1


def test_a_users_schedules_are_listed_by_name_and_hidden_from_other_users(put, client, headers):
    put("b-weekly", cron="@weekly")
    put("a-hourly", cron="@hourly")

    mine = client.get("/api/v1/schedules", headers=headers["user"]).get_json()["schedules"]
    theirs = client.get("/api/v1/schedules", headers=headers["other"]).get_json()["schedules"]

    assert [(s["name"], s["owner"]) for s in mine] == [
        ("a-hourly", "compute_user"),
        ("b-weekly", "compute_user"),
    ]
    assert theirs == []
    assert client.get("/api/v1/schedules/a-hourly", headers=headers["other"]).status_code == 404
    assert client.delete("/api/v1/schedules/a-hourly", headers=headers["other"]).status_code == 404
    assert client.get("/api/v1/schedules", headers=headers["worker"]).status_code == 403


def test_an_operator_lists_everyones_schedules_and_without_owner_names_their_own(
    put, client, headers
):
    put("nightly")
    mine = {"cron": "@daily", "job": manifest(1)}
    client.put("/api/v1/schedules/nightly", json=mine, headers=headers["operator"])

    listed = client.get("/api/v1/schedules", headers=headers["operator"]).get_json()["schedules"]
    theirs = client.delete("/api/v1/schedules/nightly", headers=headers["operator"])

    assert [(s["owner"], s["name"]) for s in listed] == [
        ("compute_user", "nightly"),
        ("operator", "nightly"),
    ]
    assert theirs.status_code == 204  # the operator's own nightly
    assert client.get("/api/v1/schedules/nightly", headers=headers["user"]).status_code == 200


def test_pausing_stops_runs_and_resuming_runs_next_from_now(rt, put, make_due, client, headers):
    put("nightly")
    make_due(timedelta(hours=2))

    paused = client.post("/api/v1/schedules/nightly/pause", headers=headers["user"])
    ran_while_paused = schedules.run_due_schedules(rt)
    resumed = client.post("/api/v1/schedules/nightly/resume", headers=headers["user"])
    again = client.post("/api/v1/schedules/nightly/resume", headers=headers["user"])

    assert (paused.status_code, paused.get_json()["paused"]) == (200, True)
    assert ran_while_paused == 0
    assert resumed.get_json()["paused"] is False
    assert datetime.fromisoformat(resumed.get_json()["next_run_at"]) > datetime.now(UTC)
    assert again.get_json()["next_run_at"] == resumed.get_json()["next_run_at"]


def test_an_operator_pauses_runs_and_deletes_a_users_schedule_named_by_owner(
    put, client, headers, db
):
    put("nightly", job=manifest(1))
    operator, whose = headers["operator"], "?owner=compute_user"

    seen = client.get(f"/api/v1/schedules/nightly{whose}", headers=operator)
    paused = client.post(f"/api/v1/schedules/nightly/pause{whose}", headers=operator)
    ran = client.post(f"/api/v1/schedules/nightly/run{whose}", headers=operator)
    resumed = client.post(f"/api/v1/schedules/nightly/resume{whose}", headers=operator)
    deleted = client.delete(f"/api/v1/schedules/nightly{whose}", headers=operator)

    assert (seen.get_json()["owner"], paused.get_json()["paused"]) == ("compute_user", True)
    assert (ran.status_code, ran.get_json()["owner"]) == (201, "compute_user")
    assert (resumed.get_json()["paused"], deleted.status_code) == (False, 204)
    audit = db.execute(
        "SELECT actor, action, details FROM audit_log WHERE action LIKE 'schedule.%' ORDER BY id"
    ).fetchall()
    assert [(a["actor"], a["action"]) for a in audit] == [
        ("compute_user", "schedule.put"),
        ("operator", "schedule.pause"),
        ("operator", "schedule.run"),
        ("operator", "schedule.resume"),
        ("operator", "schedule.delete"),
    ]
    assert {a["details"]["owner"] for a in audit[1:]} == {"compute_user"}
    assert audit[2]["details"]["job_id"] == ran.get_json()["id"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", ""),
        ("DELETE", ""),
        ("POST", "/run"),
        ("POST", "/pause"),
        ("POST", "/resume"),
        ("PUT", ""),
    ],
)
def test_a_user_naming_another_owner_is_403_and_changes_nothing(
    method, path, put, client, headers, db
):
    put("nightly")
    before = schedule_row(db, "nightly")

    answer = client.open(
        f"/api/v1/schedules/nightly{path}?owner=compute_user",
        method=method,
        json={"cron": "@daily", "job": manifest(1)} if method == "PUT" else None,
        headers=headers["other"],
    )

    assert answer.status_code == 403
    assert answer.get_json()["error"]["code"] == "forbidden"
    assert schedule_row(db, "nightly") == before
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0
    assert db.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"] == 1


def test_an_operator_may_not_put_another_users_schedule(put, client, headers, db):
    put("nightly")
    before = schedule_row(db, "nightly")

    answer = client.put(
        "/api/v1/schedules/nightly?owner=compute_user",
        json={"cron": "@daily", "job": manifest(1)},
        headers=headers["operator"],
    )

    assert answer.status_code == 403
    assert "only its owner puts a schedule" in answer.get_json()["error"]["message"]
    assert schedule_row(db, "nightly") == before
    assert db.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"] == 1


def test_naming_an_owner_who_is_no_user_is_404_saying_so(client, headers):
    answer = client.post(
        "/api/v1/schedules/nightly/pause?owner=nobody", headers=headers["operator"]
    )

    assert answer.status_code == 404
    assert answer.get_json()["error"]["message"] == "no user is named 'nobody'"


def test_a_user_may_name_themselves_as_owner(put, client, headers):
    put("nightly")

    answer = client.get("/api/v1/schedules/nightly?owner=compute_user", headers=headers["user"])

    assert (answer.status_code, answer.get_json()["name"]) == (200, "nightly")


@pytest.fixture
def maintenance_thread(app, rt):
    """Start the app's maintenance thread, passes `interval` seconds apart; stopped at the
    end as a shutdown stops it, which the test requires to be prompt."""
    started = []
    yield lambda interval: started.append(maintenance.start(app, interval))
    rt.stopping.set()
    rt.schedules_changed.set()
    for thread in started:
        thread.join(timeout=5)
        assert not thread.is_alive()


def first_job(db) -> dict:
    """The first job a run submits, once there is one."""
    return wait_for(lambda: db.execute("SELECT created_at FROM jobs").fetchone(), timeout=10)


def test_a_coordinator_submits_a_run_at_its_time_not_at_its_next_pass(maintenance_thread, put, db):
    put("nightly")
    db.execute("UPDATE schedules SET next_run_at = now() + interval '1 second'")
    slot = schedule_row(db, "nightly")["next_run_at"]

    maintenance_thread(60)  # its first pass a minute away

    assert timedelta(0) <= first_job(db)["created_at"] - slot < timedelta(seconds=1)
    assert schedule_row(db, "nightly")["last_run_at"] == slot


def test_a_sleeping_maintenance_thread_told_of_a_schedule_change_looks_again(
    maintenance_thread, rt, put, db
):
    maintenance_thread(60)  # nothing to run: asleep for a minute
    time.sleep(0.3)
    put("nightly")
    # As if the schedule just put ran in a second (a cron's finest step is a minute).
    db.execute("UPDATE schedules SET next_run_at = now() + interval '1 second'")

    rt.schedules_changed.set()

    assert first_job(db)


def test_putting_or_resuming_a_schedule_tells_this_processs_maintenance_thread(
    rt, put, client, headers
):
    told = []
    for call in (
        lambda: put("nightly"),
        lambda: client.post("/api/v1/schedules/nightly/pause", headers=headers["user"]),
        lambda: client.post("/api/v1/schedules/nightly/resume", headers=headers["user"]),
    ):
        rt.schedules_changed.clear()
        call()
        told.append(rt.schedules_changed.is_set())

    assert told == [True, True, True]


def test_the_next_run_to_wake_for_is_the_soonest_still_to_come_of_a_running_schedule(rt, put, db):
    put("overdue")
    put("paused", paused=True)
    put("hourly")
    now = datetime.now(UTC)
    db.execute("UPDATE schedules SET next_run_at = %s", (now + timedelta(minutes=1),))
    db.execute("UPDATE schedules SET next_run_at = %s WHERE name = 'overdue'", (now,))
    db.execute(
        "UPDATE schedules SET next_run_at = %s WHERE name = 'hourly'", (now + timedelta(hours=1),)
    )
    db.execute("UPDATE schedules SET next_run_at = %s WHERE name = 'paused'", (now,))

    # The overdue one waits for room in the queue, tried by each pass, not in a tight loop.
    assert schedules.seconds_until_next_run(rt, now) == 3600
    db.execute("DELETE FROM schedules WHERE name = 'hourly'")
    assert schedules.seconds_until_next_run(rt, now) is None


def test_schedule_changes_are_in_the_audit_log(put, client, headers, db):
    put("nightly")
    client.delete("/api/v1/schedules/nightly", headers=headers["user"])

    actions = db.execute(
        "SELECT action, details FROM audit_log WHERE action LIKE 'schedule.%' ORDER BY id"
    ).fetchall()
    assert [a["action"] for a in actions] == ["schedule.put", "schedule.delete"]
    assert actions[0]["details"]["cron"] == EVERY_5_MINUTES


def test_a_user_may_keep_at_most_100_schedules_and_still_change_them(put, db):
    db.execute(
        "INSERT INTO schedules (id, owner_id, name, cron, job, next_run_at)"
        " SELECT gen_random_uuid(), u.id, 'filler-' || n, '@daily', '{}', now() + interval '1 day'"
        " FROM users u, generate_series(1, 99) AS n WHERE u.name = 'compute_user'"
    )
    assert put("the-100th").status_code == 201

    refused = put("the-101st")

    assert refused.status_code == 409 and refused.get_json()["error"]["code"] == "schedule_limit"
    assert put("the-100th", cron="@hourly").status_code == 200


def test_racing_creates_never_take_a_user_past_100_schedules(rt, user, db):
    db.execute(
        "INSERT INTO schedules (id, owner_id, name, cron, job, next_run_at)"
        " SELECT gen_random_uuid(), u.id, 'filler-' || n, '@daily', '{}', now() + interval '1 day'"
        " FROM users u, generate_series(1, 95) AS n WHERE u.name = 'compute_user'"
    )
    spec = jobs.JobSpec.from_dict(manifest(1))
    start = threading.Barrier(10)
    outcomes: list[str] = []

    def create(n: int) -> None:
        start.wait()
        try:
            schedules.put_schedule(
                rt, user, schedules.ScheduleSpec(f"racer-{n}", "@daily", spec), trace_id="t"
            )
            outcomes.append("created")
        except Conflict as exc:
            outcomes.append(exc.code)

    threads = [threading.Thread(target=create, args=(n,)) for n in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sorted(outcomes) == ["created"] * 5 + ["schedule_limit"] * 5
    assert db.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"] == 100


@pytest.mark.parametrize(
    ("cron", "problem"),
    [
        ("", "Length"),
        ("* * * *", "five fields"),
        ("* * * * * *", "five fields"),
        ("61 * * * *", "not a schedule"),
        ("0 0 31 4 *", "not a schedule"),
        ("H * * * *", "not a schedule"),
        ("@reboot", "five fields"),
        (5, "Not a valid string"),
        (None, "null"),
    ],
)
def test_a_cron_that_names_no_schedule_is_422_and_writes_nothing(cron, problem, put, db):
    refused = put("nightly", cron=cron)

    assert refused.status_code == 422
    [message] = refused.get_json()["error"]["details"]["fields"]["cron"]
    assert problem.lower() in message.lower()
    assert db.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"] == 0


@pytest.mark.parametrize(
    ("job", "field"),
    [
        (manifest(1, workload="nope"), "workload"),
        (manifest(1, not_before=IN_AN_HOUR), "not_before"),
        (manifest(1, labels={"schedule": "x"}), "labels"),
        (manifest(1, timeout_seconds=0), "timeout_seconds"),
        ({**manifest(1), "tasks": []}, "tasks"),
        ({**manifest(1), "tasks": [{"input_uri": "s3://x"}, {"input_uri": "s3://y"}]}, "tasks"),
        ({k: v for k, v in manifest(1).items() if k != "input_uri"}, "input_uri"),
    ],
)
def test_a_job_no_run_could_submit_is_422_naming_its_field_within_job(job, field, put, db):
    refused = put("nightly", job=job)

    assert refused.status_code == 422
    assert field in refused.get_json()["error"]["details"]["fields"]["job"]
    assert db.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"] == 0


@pytest.mark.parametrize("name", ["-leading-dash", "x" * 101, "has space", "ünicode", ".dot"])
@pytest.mark.parametrize("method", ["put", "get", "delete"])
def test_a_name_that_cannot_name_a_schedule_is_422_naming_it(name, method, client, headers):
    body = {"cron": EVERY_5_MINUTES, "job": manifest(1)}

    refused = client.open(
        f"/api/v1/schedules/{name}", method=method.upper(), json=body, headers=headers["user"]
    )

    assert refused.status_code == 422
    assert refused.get_json()["error"]["details"]["fields"] == {"name": [schedules.NAME_RULE]}


def test_a_body_missing_its_job_or_with_an_unknown_field_is_422_naming_each(client, headers):
    refused = client.put(
        "/api/v1/schedules/nightly",
        json={"cron": EVERY_5_MINUTES, "paused": "yes", "extra": 1},
        headers=headers["user"],
    )

    assert refused.status_code == 422
    assert set(refused.get_json()["error"]["details"]["fields"]) == {"job", "paused", "extra"}


@settings(CHUNKWISE_MANIFEST_MAX_QUEUED_TASKS="2", CHUNKWISE_MANIFEST_MAX_TASKS_PER_JOB="2")
def test_operators_see_how_many_schedules_fail_and_how_late_a_run_is(
    rt, put, make_due, submit, client, headers
):
    submit(manifest(2))  # the queue is full
    put("nightly", job=manifest(1))
    put("hourly", cron="@hourly", paused=True)
    put("weekly", cron="@weekly")
    make_due(timedelta(minutes=10))
    schedules.run_due_schedules(rt)

    figures = client.get("/api/v1/queue", headers=headers["operator"]).get_json()["schedules"]
    metrics = {
        (f.name, tuple(s.labels.values())): s.value
        for f in QueueCollector(rt).collect()
        for s in f.samples
        if "schedule" in f.name
    }

    # The paused one is moved too, but no lag counts it.
    assert (figures["active"], figures["paused"], figures["failing"]) == (2, 1, 2)
    assert 590 <= figures["lag_seconds"] <= 700
    assert metrics[("chunkwise_cluster_schedules", ("active",))] == 2
    assert metrics[("chunkwise_cluster_schedules", ("paused",))] == 1
    assert metrics[("chunkwise_cluster_failing_schedules", ())] == 2
    assert 590 <= metrics[("chunkwise_cluster_schedule_lag_seconds", ())] <= 700


def test_a_schedule_in_a_time_zone_runs_on_its_clocks_and_a_new_zone_moves_its_next_run(put):
    in_utc = put("morning", cron="0 9 * * *").get_json()
    in_tokyo = put("morning", cron="0 9 * * *", timezone="Asia/Tokyo").get_json()

    assert (in_utc["timezone"], datetime.fromisoformat(in_utc["next_run_at"]).hour) == ("UTC", 9)
    # 09:00 in Tokyo, which keeps no summer time, is midnight UTC.
    assert (in_tokyo["timezone"], datetime.fromisoformat(in_tokyo["next_run_at"]).hour) == (
        "Asia/Tokyo",
        0,
    )


@pytest.mark.parametrize("zone", ["Mars/Olympus", "../etc/passwd", "", "x" * 65, 9])
def test_a_time_zone_that_is_no_iana_name_is_422_naming_timezone_and_writes_nothing(zone, put, db):
    refused = put("morning", timezone=zone)

    assert refused.status_code == 422
    assert "timezone" in refused.get_json()["error"]["details"]["fields"]
    assert db.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"] == 0


def test_running_a_schedule_now_submits_its_job_and_leaves_its_times(put, client, headers):
    put("nightly", job=manifest(3), paused=True)
    before = client.get("/api/v1/schedules/nightly", headers=headers["user"]).get_json()
    key = {"Idempotency-Key": "run-1", **headers["user"]}

    first = client.post("/api/v1/schedules/nightly/run", headers=key)
    again = client.post("/api/v1/schedules/nightly/run", headers=key)

    assert (first.status_code, again.status_code) == (201, 200)
    job = first.get_json()
    assert again.get_json()["id"] == job["id"]
    assert (job["chunks_total"], job["labels"]) == (3, {"schedule": "nightly"})
    after = client.get("/api/v1/schedules/nightly", headers=headers["user"]).get_json()
    assert {k: after[k] for k in ("next_run_at", "last_run_at", "last_job_id", "paused")} == {
        k: before[k] for k in ("next_run_at", "last_run_at", "last_job_id", "paused")
    }


@settings(CHUNKWISE_MANIFEST_MAX_QUEUED_TASKS="2", CHUNKWISE_MANIFEST_MAX_TASKS_PER_JOB="2")
def test_running_a_schedule_now_is_refused_like_any_job_and_only_by_its_owner(
    put, submit, client, headers
):
    put("nightly", job=manifest(1))
    submit(manifest(2))

    full = client.post("/api/v1/schedules/nightly/run", headers=headers["user"])
    theirs = client.post("/api/v1/schedules/nightly/run", headers=headers["other"])
    missing = client.post("/api/v1/schedules/nope/run", headers=headers["user"])

    assert full.status_code == 429 and "Retry-After" in full.headers
    assert (theirs.status_code, missing.status_code) == (404, 404)
