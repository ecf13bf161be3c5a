"""The event feed: each owner's job stories, in an order no later page can go back on."""

from __future__ import annotations

import random
import threading
import time

import psycopg
import pytest
from psycopg.rows import dict_row

from repositories import events as event_rows
from tests.integration.manifests import WORKER, manifest


def created_events(database_url: str, job_id: str) -> list[int]:
    """The ids of a job's job.created events."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT id FROM outbox WHERE job_id = %s AND event = 'job.created'", [job_id]
        ).fetchall()
    return [id_ for (id_,) in rows]


def test_the_event_feed_tells_the_owner_its_jobs_story_in_order(
    submit, claim, complete, client, headers
):
    job = submit(manifest(2))
    for task in claim(WORKER, capacity=2):
        complete(task)
    submit(manifest(1), as_="other")

    feed = client.get("/api/v1/events?after=0", headers=headers["user"]).get_json()

    mine = [(e["event"], e["job_id"]) for e in feed["events"]]
    assert mine == [
        ("job.created", job["id"]),
        ("chunk.completed", job["id"]),
        ("chunk.completed", job["id"]),
        ("job.succeeded", job["id"]),
    ]
    ids = [e["id"] for e in feed["events"]]
    assert ids == sorted(ids) and feed["next_after"] == ids[-1]
    assert (
        client.get(f"/api/v1/events?after={ids[-1]}", headers=headers["user"]).get_json()["events"]
        == []
    )


def test_the_event_feed_hides_other_users_events(submit, client, headers):
    submit(manifest(1))

    feed = client.get("/api/v1/events?after=0", headers=headers["other"]).get_json()

    assert feed["events"] == []


def test_an_operator_sees_every_users_events(submit, client, headers):
    mine = submit(manifest(1))
    theirs = submit(manifest(1), as_="other")

    feed = client.get("/api/v1/events?after=0", headers=headers["operator"]).get_json()

    assert [(e["event"], e["job_id"]) for e in feed["events"]] == [
        ("job.created", mine["id"]),
        ("job.created", theirs["id"]),
    ]


def test_the_event_feed_waits_for_an_event_still_being_written_rather_than_pass_it(
    submit, client, headers, database_url
):
    first_job = submit(manifest(1))
    with psycopg.connect(database_url) as writer:
        # A result's transaction has written its event and not yet committed...
        writer.execute(
            "INSERT INTO outbox (job_id, owner_id, event, trace_id)"
            " SELECT id, owner_id, 'chunk.completed', 'late' FROM jobs WHERE id = %s",
            [first_job["id"]],
        )
        # ...while a later one writes and commits its own.
        second_job = submit(manifest(1))
        first = client.get("/api/v1/events?after=0", headers=headers["user"]).get_json()
    # The writer's transaction commits as its block ends.
    rest = client.get(
        f"/api/v1/events?after={first['next_after']}", headers=headers["user"]
    ).get_json()

    assert [(e["event"], e["job_id"]) for e in first["events"]] == [
        ("job.created", first_job["id"])
    ]
    assert [(e["event"], e["job_id"], e["trace_id"]) for e in rest["events"]] == [
        ("chunk.completed", first_job["id"], "late"),
        ("job.created", second_job["id"], rest["events"][1]["trace_id"]),
    ]


def test_a_follower_whose_last_event_was_deleted_resumes_after_it(submit, client, headers, db):
    submit(manifest(1))
    read = client.get("/api/v1/events?after=0", headers=headers["user"]).get_json()
    db.execute("DELETE FROM outbox WHERE id = %s", [read["next_after"]])
    job = submit(manifest(1))

    resumed = client.get(f"/api/v1/events?after={read['next_after']}", headers=headers["user"])

    assert [(e["event"], e["job_id"]) for e in resumed.get_json()["events"]] == [
        ("job.created", job["id"])
    ]


def test_the_event_feed_of_one_job_holds_only_that_jobs_events(
    submit, claim, complete, client, headers
):
    job = submit(manifest(1))
    submit(manifest(1))
    for task in claim(WORKER, capacity=2):
        complete(task)

    feed = client.get(
        "/api/v1/events", query_string={"job_id": job["id"]}, headers=headers["user"]
    ).get_json()

    assert [(e["event"], e["job_id"]) for e in feed["events"]] == [
        ("job.created", job["id"]),
        ("chunk.completed", job["id"]),
        ("job.succeeded", job["id"]),
    ]


def test_the_event_feed_of_another_users_job_is_empty(submit, client, headers):
    theirs = submit(manifest(1), as_="other")

    feed = client.get(
        "/api/v1/events", query_string={"job_id": theirs["id"]}, headers=headers["user"]
    )

    assert feed.status_code == 200
    assert feed.get_json()["events"] == []


def test_an_event_feed_job_id_that_is_no_uuid_is_422_naming_it(client, headers):
    response = client.get("/api/v1/events?job_id=nope", headers=headers["user"])

    assert response.status_code == 422
    assert list(response.get_json()["error"]["details"]["fields"]) == ["job_id"]


def test_a_follower_sees_every_event_once_while_writers_commit_out_of_order(submit, database_url):
    job = submit(manifest(1))
    writers, events_each = 4, 25
    written: list[int] = []
    done = threading.Event()

    def write(seed: int) -> None:
        pause = random.Random(seed)
        with psycopg.connect(database_url) as conn:
            for _ in range(events_each):
                with conn.transaction():
                    row = conn.execute(
                        "INSERT INTO outbox (job_id, owner_id, event, trace_id)"
                        " SELECT id, owner_id, 'chunk.completed', 'w' FROM jobs WHERE id = %s"
                        " RETURNING id",
                        [job["id"]],
                    ).fetchone()
                    # Held open a while: ids drawn in one order commit in another.
                    time.sleep(pause.uniform(0, 0.01))
                written.append(row[0])

    def follow(seen: list[int]) -> None:
        after = 0
        with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
            while True:
                finished = done.is_set()
                page = event_rows.list_events(conn, owner_id=None, after=after, limit=7)
                seen.extend(e.id for e in page.events)
                after = page.next_after
                if finished and not page.events:
                    return

    seen: list[int] = []
    follower = threading.Thread(target=follow, args=(seen,))
    follower.start()
    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    follower.join(timeout=30)

    assert len(written) == writers * events_each
    assert sorted(seen) == sorted([*written, *created_events(database_url, job["id"])])


# --- only some types of event -----------------------------------------------------------------


def feed(client, headers, query: str, who: str = "user") -> dict:
    """One page of the feed."""
    return client.get(f"/api/v1/events?{query}", headers=headers[who]).get_json()


def test_a_follower_of_some_types_reads_only_those_and_moves_on_past_the_rest(
    submit, claim, complete, client, headers
):
    done = submit(manifest(2))
    for task in claim(WORKER, capacity=2):
        complete(task)
    dropped = submit(manifest(1))
    client.post(f"/api/v1/jobs/{dropped['id']}/cancel", headers=headers["user"])
    submit(manifest(1))  # the last event is of neither type
    everything = feed(client, headers, "after=0")

    page = feed(client, headers, "after=0&type=job.succeeded&type=job.cancelled")

    assert [(e["event"], e["job_id"]) for e in page["events"]] == [
        ("job.succeeded", done["id"]),
        ("job.cancelled", dropped["id"]),
    ]
    assert page["next_after"] == everything["events"][-1]["id"]
    assert feed(client, headers, f"after={page['next_after']}&type=job.succeeded")["events"] == []


def test_a_full_page_of_one_type_resumes_after_its_last_event(submit, client, headers):
    jobs = [submit(manifest(1))["id"] for _ in range(3)]

    first = feed(client, headers, "after=0&type=job.created&limit=2")
    second = feed(client, headers, f"after={first['next_after']}&type=job.created&limit=2")

    assert first["next_after"] == first["events"][-1]["id"]
    assert [e["job_id"] for e in first["events"] + second["events"]] == jobs


def test_a_rare_type_behind_many_others_is_reached_a_bounded_scan_at_a_time(
    submit, claim, complete, client, headers, monkeypatch
):
    monkeypatch.setattr(event_rows, "SCAN_LIMIT", 3)
    job = submit(manifest(5))
    for task in claim(WORKER, capacity=5):
        complete(task)  # job.created, 5 chunk.completed, job.succeeded: 7 events
    after, pages, found = 0, 0, []

    while not found:
        page = feed(client, headers, f"after={after}&type=job.succeeded&limit=1")
        pages, found, after = pages + 1, page["events"], page["next_after"]

    assert pages == 3 and found[0]["job_id"] == job["id"]


def test_types_narrow_one_jobs_events_too(submit, claim, complete, client, headers):
    job = submit(manifest(2))
    submit(manifest(1))
    for task in claim(WORKER, capacity=3):
        complete(task)

    page = feed(client, headers, f"after=0&job_id={job['id']}&type=chunk.completed")

    assert [e["event"] for e in page["events"]] == ["chunk.completed"] * 2
    assert {e["job_id"] for e in page["events"]} == {job["id"]}


@pytest.mark.parametrize("query", ["type=job.exploded", "type=", "type=job.failed" + "&type=x" * 6])
def test_an_event_type_the_feed_never_holds_is_422_naming_type(query, client, headers):
    refused = client.get(f"/api/v1/events?{query}", headers=headers["user"])

    assert refused.status_code == 422
    assert "type" in refused.get_json()["error"]["details"]["fields"]
