"""Watching a job: its ETag names what its view shows, and a GET can wait for that to change."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import replace

import pytest

from services import jobs, tasks
from services.wakeups import Wakeups
from tests.integration.manifests import WORKER, manifest, sha256_of


def version_of(client, headers, job_id: str) -> str:
    """The job's current ETag."""
    response = client.get(f"/api/v1/jobs/{job_id}", headers=headers["user"])
    assert response.status_code == 200
    return response.headers["ETag"]


def complete(rt, lease: dict) -> None:
    """Complete a task WORKER leased, as the services would for its result."""
    with rt.pool.connection() as conn:
        bound = "SELECT credential_id FROM workers WHERE id = %s"
        credential = conn.execute(bound, (WORKER,)).fetchone()["credential_id"]
    uri = f"s3://out/{lease['task_id']}"
    tasks.complete_task(
        rt,
        uuid.UUID(lease["task_id"]),
        WORKER,
        credential,
        lease["attempt"],
        lease["lease_token"],
        tasks.TaskResult(uri, sha256_of(uri), {}),
    )


def watch(client, headers, job_id: str, etag: str, wait_seconds: float, as_: str = "user"):
    """GET the job naming the version the caller has, waiting up to wait_seconds."""
    return client.get(
        f"/api/v1/jobs/{job_id}?wait_seconds={wait_seconds}",
        headers={**headers[as_], "If-None-Match": etag},
    )


def test_a_get_naming_the_current_version_is_304_without_a_body(submit, client, headers):
    job = submit(manifest(2))
    etag = version_of(client, headers, job["id"])

    response = watch(client, headers, job["id"], etag, 0)

    assert response.status_code == 304
    assert response.data == b""
    assert response.headers["ETag"] == etag


def test_a_weakened_etag_names_the_same_version(submit, client, headers):
    job = submit(manifest(1))
    etag = version_of(client, headers, job["id"])

    response = watch(client, headers, job["id"], f"W/{etag}", 0)

    assert response.status_code == 304


def test_a_list_of_etags_holding_the_current_version_is_304_and_one_without_it_200(
    submit, client, headers
):
    job = submit(manifest(1))
    etag = version_of(client, headers, job["id"])

    holding = watch(client, headers, job["id"], f'"older", {etag}', 0)
    without = watch(client, headers, job["id"], '"older", "other"', 0)

    assert holding.status_code == 304
    assert without.status_code == 200


def test_if_none_match_star_is_304_at_once_and_a_missing_job_still_404(submit, client, headers):
    job = submit(manifest(1))
    started = time.monotonic()

    response = watch(client, headers, job["id"], "*", 5)

    assert response.status_code == 304
    assert time.monotonic() - started < 2
    assert response.headers["ETag"] == version_of(client, headers, job["id"])
    assert watch(client, headers, str(uuid.uuid4()), "*", 0).status_code == 404


def test_the_version_changes_when_a_chunk_is_leased_and_again_when_it_completes(
    submit, claim, complete, client, headers
):
    job = submit(manifest(2))
    queued = version_of(client, headers, job["id"])
    [leased] = claim(WORKER)
    running = version_of(client, headers, job["id"])
    complete(leased)
    one_done = version_of(client, headers, job["id"])

    assert len({queued, running, one_done}) == 3
    response = watch(client, headers, job["id"], running, 0)
    assert response.status_code == 200
    assert response.get_json()["chunks_completed"] == 1


def test_a_waiting_get_answers_as_soon_as_another_coordinator_completes_a_chunk(
    rt, submit, claim, client, headers
):
    job = submit(manifest(2))
    [leased] = claim(WORKER)
    etag = version_of(client, headers, job["id"])
    # A second coordinator on the same database: its only way to wake us is NOTIFY.
    elsewhere = replace(rt, wakeups=Wakeups(None))

    def complete_soon() -> None:
        time.sleep(0.3)
        complete(elsewhere, leased)

    completer = threading.Thread(target=complete_soon)
    started = time.monotonic()
    completer.start()
    response = watch(client, headers, job["id"], etag, 10)
    answered = time.monotonic() - started
    completer.join()

    assert response.status_code == 200
    assert response.get_json()["chunks_completed"] == 1
    assert response.headers["ETag"] != etag
    # Well before the wait's end, and before its once-a-second re-check could have seen it.
    assert 0.3 <= answered < 0.9


def test_a_waiting_get_on_a_job_that_does_not_change_is_304_after_wait_seconds(
    submit, client, headers
):
    job = submit(manifest(1))
    etag = version_of(client, headers, job["id"])

    started = time.monotonic()
    response = watch(client, headers, job["id"], etag, 1.2)

    assert response.status_code == 304
    assert 1.2 <= time.monotonic() - started < 3


def test_a_get_naming_an_old_version_answers_at_once_with_the_job(submit, claim, client, headers):
    job = submit(manifest(1))
    etag = version_of(client, headers, job["id"])
    claim(WORKER)

    started = time.monotonic()
    response = watch(client, headers, job["id"], etag, 10)

    assert response.status_code == 200
    assert response.get_json()["chunks_by_state"]["leased"] == 1
    assert time.monotonic() - started < 1


def test_waiting_on_another_users_job_is_404_at_once(submit, client, headers):
    job = submit(manifest(1))
    etag = version_of(client, headers, job["id"])

    started = time.monotonic()
    response = watch(client, headers, job["id"], etag, 10, as_="other")

    assert response.status_code == 404
    assert time.monotonic() - started < 1


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("wait_seconds=31", "wait_seconds"),
        ("wait_seconds=-1", "wait_seconds"),
        ("wait_seconds=soon", "wait_seconds"),
        ("wait_seconds=1&until=succeeded", "until"),
        ("wait_seconds=1&until=FINISHED", "until"),
        ("wait_seconds=1&until=", "until"),
    ],
)
def test_a_wait_outside_0_to_30_seconds_or_until_other_than_finished_is_422_naming_it(
    submit, client, headers, query, field
):
    job = submit(manifest(1))

    response = client.get(f"/api/v1/jobs/{job['id']}?{query}", headers=headers["user"])

    assert response.status_code == 422
    assert field in response.get_json()["error"]["details"]["fields"]


def test_a_watch_until_finished_answers_once_the_job_succeeds_not_at_each_change(
    rt, submit, claim, client, headers
):
    job = submit(manifest(2))
    leases = claim(WORKER, capacity=2)

    def complete_both() -> None:
        for lease in leases:  # two changes, 0.3 s apart; only the second finishes the job
            time.sleep(0.3)
            complete(rt, lease)

    completer = threading.Thread(target=complete_both)
    started = time.monotonic()
    completer.start()
    response = client.get(
        f"/api/v1/jobs/{job['id']}?wait_seconds=10&until=finished", headers=headers["user"]
    )
    answered = time.monotonic() - started
    completer.join()

    assert response.status_code == 200
    assert response.get_json()["status"] == "succeeded"
    assert 0.6 <= answered < 1.5


def test_a_watch_until_finished_reads_only_the_status_at_the_changes_on_the_way(
    rt, submit, claim, client, headers, monkeypatch
):
    job = submit(manifest(3))
    leases = claim(WORKER, capacity=3)
    whole_reads = []
    read_view = jobs._read_view
    monkeypatch.setattr(jobs, "_read_view", lambda *a: whole_reads.append(1) or read_view(*a))

    def complete_all() -> None:
        for lease in leases:  # three changes; only the last finishes the job
            time.sleep(0.2)
            complete(rt, lease)

    completer = threading.Thread(target=complete_all)
    completer.start()
    response = client.get(
        f"/api/v1/jobs/{job['id']}?wait_seconds=10&until=finished", headers=headers["user"]
    )
    completer.join()

    # The whole job at the start and once it has finished; each change on the way, its status.
    assert len(whole_reads) == 2
    body = response.get_json()
    assert (body["status"], body["chunks_completed"]) == ("succeeded", 3)
    assert response.headers["ETag"] == version_of(client, headers, job["id"])


def test_a_watch_until_finished_on_a_finished_job_answers_at_once(submit, client, headers):
    job = submit(manifest(1))
    assert (
        client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=headers["user"]).status_code == 200
    )

    started = time.monotonic()
    response = client.get(
        f"/api/v1/jobs/{job['id']}?wait_seconds=10&until=finished", headers=headers["user"]
    )

    assert response.status_code == 200
    assert response.get_json()["status"] == "cancelled"
    assert time.monotonic() - started < 1


def test_a_watch_until_finished_of_an_unfinished_job_answers_after_wait_seconds(
    submit, client, headers
):
    job = submit(manifest(1))
    etag = version_of(client, headers, job["id"])
    url = f"/api/v1/jobs/{job['id']}?wait_seconds=1.2&until=finished"

    started = time.monotonic()
    as_it_is = client.get(url, headers=headers["user"])
    waited = time.monotonic() - started
    unchanged = client.get(url, headers={**headers["user"], "If-None-Match": etag})

    # Without a version the caller hears the job as it is; naming the current one, 304.
    assert (as_it_is.status_code, as_it_is.get_json()["status"]) == (200, "queued")
    assert 1.2 <= waited < 3
    assert unchanged.status_code == 304
