"""A job may be scheduled: admitted now, its tasks claimed from its not_before on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.metrics import QueueCollector
from devstack.sample_csv import generate_csv
from tests.integration.csv_worker import files_under, upload, upload_body
from tests.integration.manifests import WORKER, manifest


def at(**delta: float) -> str:
    """A time this far from now, as ISO 8601 with its offset."""
    return (datetime.now(UTC) + timedelta(**delta)).isoformat()


def test_a_scheduled_job_is_queued_and_its_tasks_wait_for_its_time(
    submit, claim, client, headers, time_passes
):
    when = at(hours=2)
    job = submit(manifest(2, not_before=when))

    assert job["status"] == "queued"
    assert datetime.fromisoformat(job["not_before"]) == datetime.fromisoformat(when)
    assert claim(WORKER, capacity=2) == []
    time_passes()
    assert len(claim(WORKER, capacity=2)) == 2
    view = client.get(f"/api/v1/jobs/{job['id']}", headers=headers["user"]).get_json()
    assert view["status"] == "running" and view["not_before"] == job["not_before"]


def test_a_job_scheduled_for_a_time_already_past_runs_at_once(submit, claim):
    job = submit(manifest(1, not_before=at(minutes=-5)))

    assert [t["job_id"] for t in claim(WORKER)] == [job["id"]]


def test_other_jobs_run_while_a_scheduled_one_waits(submit, claim):
    submit(manifest(1, not_before=at(hours=1), priority=9))
    now = submit(manifest(1))

    assert [t["job_id"] for t in claim(WORKER, capacity=2)] == [now["id"]]


def test_an_unscheduled_job_says_so(submit):
    assert submit(manifest(1))["not_before"] is None


def test_a_replay_must_ask_for_the_same_time(client, headers):
    key = {"Idempotency-Key": "nightly-2026-12-05"}
    body = manifest(1, not_before=at(hours=3))
    first = client.post("/api/v1/jobs", json=body, headers={**headers["user"], **key})
    again = client.post("/api/v1/jobs", json=body, headers={**headers["user"], **key})
    moved = client.post(
        "/api/v1/jobs",
        json={**body, "not_before": at(hours=4)},
        headers={**headers["user"], **key},
    )

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.get_json()["id"] == first.get_json()["id"]
    assert moved.status_code == 409
    assert moved.get_json()["error"]["code"] == "idempotency_conflict"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("2026-12-05T10:00:00", "Not a valid aware datetime."),
        ("tomorrow", "Not a valid datetime."),
        (12, "Not a valid datetime."),
        (at(days=400), "must be within a year of now"),
        (at(days=-400), "must be within a year of now"),
        ("0001-01-01T00:00:00+14:00", "must be within a year of now"),
    ],
    ids=["no-offset", "words", "number", "too-far", "too-long-ago", "year-one"],
)
def test_a_not_before_it_cannot_use_is_422_naming_it_and_nothing_is_written(
    client, headers, db, value, problem
):
    response = client.post(
        "/api/v1/jobs", json=manifest(1, not_before=value), headers=headers["user"]
    )

    assert response.status_code == 422
    assert response.get_json()["error"]["details"]["fields"]["not_before"] == [problem]
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


@pytest.mark.parametrize("send", [upload, upload_body], ids=["form", "query"])
def test_a_csv_upload_may_be_scheduled_too(send, client, headers, worker, time_passes):
    data = generate_csv(100, seed=3)

    response = send(client, headers["user"], data, chunks=2, not_before=at(hours=1))

    assert response.status_code == 201, response.get_json()
    assert response.get_json()["not_before"] is not None
    assert worker.claim(capacity=2) == []
    time_passes()
    assert len(worker.claim(capacity=2)) == 2


def test_a_csv_upload_with_a_not_before_it_cannot_use_writes_nothing(
    client, headers, db, archive_dir
):
    response = upload_body(
        client, headers["user"], generate_csv(100, seed=3), not_before="next tuesday"
    )

    assert response.status_code == 422
    assert response.get_json()["error"]["details"]["fields"]["not_before"] == [
        "Not a valid datetime."
    ]
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0
    assert files_under(archive_dir) == []


def test_a_scheduled_jobs_creation_event_says_when_it_may_start(submit, client, headers):
    job = submit(manifest(1, not_before=at(hours=1)))
    submit(manifest(1))

    feed = client.get("/api/v1/events", headers=headers["user"]).get_json()["events"]

    scheduled, unscheduled = (e["payload"] for e in feed)
    assert datetime.fromisoformat(scheduled["not_before"]) == datetime.fromisoformat(
        job["not_before"]
    )
    assert "not_before" not in unscheduled


def test_a_job_waiting_for_its_time_is_not_counted_late_until_its_time_has_come(
    submit, client, headers, db
):
    submit(manifest(1, not_before=at(hours=1)))
    db.execute("UPDATE tasks SET created_at = now() - interval '1 day'")

    def oldest() -> float | None:
        queue = client.get("/api/v1/queue", headers=headers["operator"]).get_json()
        return queue["oldest_pending_seconds"]

    waiting = oldest()
    db.execute("UPDATE tasks SET not_before = now() - interval '10 minutes'")
    due = oldest()

    assert waiting is None
    assert 590 <= due <= 700  # since its time came, not since the day-old job was created


def test_waiting_chunks_are_counted_by_workload_for_operators_and_metrics(
    submit, client, headers, rt
):
    submit(manifest(2, not_before=at(hours=1)))
    submit(manifest(1, workload="render", not_before=at(hours=1)))
    submit(manifest(1))

    queue = client.get("/api/v1/queue", headers=headers["operator"]).get_json()
    [family] = [
        f for f in QueueCollector(rt).collect() if f.name == "chunkwise_cluster_waiting_chunks"
    ]

    assert queue["waiting"] == {"echo": 2, "render": 1}
    assert {s.labels["workload"]: s.value for s in family.samples} == {"echo": 2, "render": 1}
