"""Long polls share a per-process budget of waiting places; beyond it they answer at once."""

from __future__ import annotations

import re
import threading
import time

import pytest

from services import metrics
from tests.integration.csv_worker import settings
from tests.integration.manifests import WORKER, manifest

ONE_PLACE = settings(CHUNKWISE_MAX_WAITING_REQUESTS="1")


def waiting_now() -> float:
    """The gauge of requests waiting in this process."""
    [family] = metrics.WAITING_REQUESTS.collect()
    return sum(sample.value for sample in family.samples)


@pytest.fixture
def waiting_claim(app, headers, eventually):
    """A worker's claim on an empty queue, waiting in a thread; yields once it holds a place."""
    answers: list = []
    before = waiting_now()

    def claim() -> None:
        body = {"worker_id": "holder", "workloads": ["render"], "capacity": 1, "wait_seconds": 3}
        answers.append(
            app.test_client().post("/api/v1/tasks/claim", json=body, headers=headers["worker"])
        )

    holder = threading.Thread(target=claim)
    holder.start()
    assert eventually(5, lambda: waiting_now() > before)
    yield answers
    holder.join()


def claim_waiting(client, headers, seconds: float, workloads=("echo",)):
    """POST a claim that may wait `seconds`; the answer and how long it took."""
    body = {"worker_id": WORKER, "workloads": list(workloads), "capacity": 1}
    started = time.monotonic()
    answer = client.post(
        "/api/v1/tasks/claim", json={**body, "wait_seconds": seconds}, headers=headers["worker"]
    )
    return answer, time.monotonic() - started


@ONE_PLACE
def test_a_claim_beyond_the_waiting_budget_is_204_at_once_with_retry_after(
    waiting_claim, client, headers
):
    answer, took = claim_waiting(client, headers, 5)

    assert answer.status_code == 204
    assert answer.headers["Retry-After"] == "3"
    assert took < 1


@ONE_PLACE
def test_a_claim_beyond_the_waiting_budget_still_leases_what_one_try_finds(
    waiting_claim, submit, client, headers
):
    submit(manifest(1))

    answer, took = claim_waiting(client, headers, 5)

    assert answer.status_code == 200
    assert len(answer.get_json()["tasks"]) == 1
    assert "Retry-After" not in answer.headers
    assert took < 1


@ONE_PLACE
def test_a_waiting_place_is_given_back_when_its_long_poll_ends(waiting_claim, client, headers):
    refused, _ = claim_waiting(client, headers, 5)
    while not waiting_claim:
        time.sleep(0.05)

    answer, took = claim_waiting(client, headers, 0.5)

    assert refused.status_code == 204 and "Retry-After" in refused.headers
    [held] = waiting_claim
    assert held.status_code == 204 and "Retry-After" not in held.headers
    assert answer.status_code == 204 and "Retry-After" not in answer.headers
    assert took >= 0.5


@ONE_PLACE
def test_a_job_watch_beyond_the_waiting_budget_is_304_at_once_with_retry_after(
    waiting_claim, submit, client, headers
):
    job = submit(manifest(1))
    etag = client.get(f"/api/v1/jobs/{job['id']}", headers=headers["user"]).headers["ETag"]

    started = time.monotonic()
    answer = client.get(
        f"/api/v1/jobs/{job['id']}?wait_seconds=5",
        headers={**headers["user"], "If-None-Match": etag},
    )

    assert answer.status_code == 304
    assert answer.headers["Retry-After"] == "3"
    assert answer.headers["ETag"] == etag
    assert time.monotonic() - started < 1


@ONE_PLACE
def test_a_watch_until_finished_beyond_the_budget_answers_the_unfinished_job_with_retry_after(
    waiting_claim, submit, client, headers
):
    job = submit(manifest(1))

    started = time.monotonic()
    answer = client.get(
        f"/api/v1/jobs/{job['id']}?wait_seconds=5&until=finished", headers=headers["user"]
    )

    # The caller named no version, so it hears the job as it is, and when to ask again.
    assert answer.status_code == 200
    assert answer.get_json()["status"] == "queued"
    assert answer.headers["Retry-After"] == "3"
    assert time.monotonic() - started < 1


@ONE_PLACE
def test_a_refused_wait_is_counted_in_metrics(waiting_claim, client, headers):
    [family] = metrics.REFUSED_WAITS.collect()
    before = sum(s.value for s in family.samples if s.name.endswith("_total"))

    claim_waiting(client, headers, 5)

    [family] = metrics.REFUSED_WAITS.collect()
    assert sum(s.value for s in family.samples if s.name.endswith("_total")) == before + 1


@settings(CHUNKWISE_MAX_WAITING_REQUESTS="0")
def test_a_budget_of_none_answers_every_long_poll_at_once(client, headers):
    answer, took = claim_waiting(client, headers, 5)

    assert answer.status_code == 204
    assert answer.headers["Retry-After"] == "3"
    assert took < 1


@ONE_PLACE
def test_the_dashboards_job_watch_beyond_the_waiting_budget_answers_at_once_with_retry_after(
    waiting_claim, app, tokens, submit
):
    job = submit(manifest(1))
    browser = app.test_client()
    form = browser.get("/ui/sign-in")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)
    browser.post("/ui/sign-in", data={"csrf_token": csrf, "token": tokens["user"]})
    version = browser.get(f"/ui/jobs/{job['id']}/watch").get_json()["version"]

    started = time.monotonic()
    answer = browser.get(f"/ui/jobs/{job['id']}/watch?version={version}")

    assert answer.status_code == 200
    assert answer.get_json()["version"] == version
    assert answer.get_json()["retry_after"] == 3
    assert answer.headers["Retry-After"] == "3"
    assert time.monotonic() - started < 1
