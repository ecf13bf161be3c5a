"""A retryable failure waits before its next attempt: the backoff, or the worker's own word."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services import tasks
from tests.integration.csv_worker import settings
from tests.integration.manifests import WORKER, manifest

BACKOFF = settings(CHUNKWISE_RETRY_DELAY_SECONDS="10", CHUNKWISE_RETRY_DELAY_MAX_SECONDS="25")


def failure(claimed: dict, *, retryable: bool = True, **extra: object) -> dict:
    """A failure report for a claimed task under its own attempt."""
    return {
        "worker_id": WORKER,
        "attempt": claimed["attempt"],
        "lease_token": claimed["lease_token"],
        "error_code": "upstream_down",
        "error_message": "the upstream answered 503",
        "retryable": retryable,
        **extra,
    }


@pytest.fixture
def fail(task_call):
    """Report a failure and return the task as the answer shows it."""

    def report(claimed: dict, **extra: object) -> dict:
        response = task_call(claimed["task_id"], "failure", failure(claimed, **extra))
        assert response.status_code == 200, response.get_json()
        return response.get_json()

    return report


def waits(task: dict) -> float:
    """Seconds from now until the task may be claimed again, as its answer says."""
    until = datetime.fromisoformat(task["not_before"])
    return (until - datetime.now(until.tzinfo)).total_seconds()


@BACKOFF
def test_a_retryable_failure_is_not_claimed_again_until_its_backoff_has_passed(
    submit, claim, fail, time_passes
):
    submit(manifest(1, max_attempts=3))
    [first] = claim(WORKER)

    task = fail(first)

    assert task["status"] == "pending"
    assert 4 <= waits(task) <= 10
    assert claim(WORKER) == []
    time_passes()
    [second] = claim(WORKER)
    assert (second["task_id"], second["attempt"]) == (first["task_id"], 2)


@BACKOFF
def test_the_backoff_doubles_with_each_attempt_up_to_its_maximum(submit, claim, fail, time_passes):
    submit(manifest(1, max_attempts=4))
    delays = []
    for _ in range(3):
        [leased] = claim(WORKER)
        delays.append(waits(fail(leased)))
        time_passes()

    # Half to all of 10, 20 and then 40 held to 25 seconds.
    assert 4 <= delays[0] <= 10 and 9 <= delays[1] <= 20 and 12 <= delays[2] <= 25


@BACKOFF
def test_a_worker_that_names_its_retry_after_is_taken_at_its_word(submit, claim, fail):
    submit(manifest(1, max_attempts=3))
    [leased] = claim(WORKER)

    task = fail(leased, retry_after_seconds=120)

    assert 118 <= waits(task) <= 120
    assert claim(WORKER) == []


@BACKOFF
def test_a_retry_after_of_zero_is_claimable_at_once_whatever_the_backoff(submit, claim, fail):
    submit(manifest(1, max_attempts=3))
    [leased] = claim(WORKER)

    fail(leased, retry_after_seconds=0)

    assert [t["attempt"] for t in claim(WORKER)] == [2]


@BACKOFF
def test_a_failure_that_is_not_retried_waits_for_nothing(submit, claim, fail):
    submit(manifest(1, max_attempts=3))
    [leased] = claim(WORKER)

    task = fail(leased, retryable=False, retry_after_seconds=60)

    assert (task["status"], task["not_before"]) == ("failed", None)


@BACKOFF
def test_a_waiting_task_shows_when_it_may_run_and_others_are_claimed_meanwhile(
    submit, claim, fail, client, headers
):
    waiting = submit(manifest(1, max_attempts=3))
    [leased] = claim(WORKER)
    fail(leased)
    other = submit(manifest(1))

    claimed = claim(WORKER)
    [chunk] = client.get(
        f"/api/v1/jobs/{waiting['id']}/chunks", headers=headers["user"]
    ).get_json()["chunks"]

    assert [t["job_id"] for t in claimed] == [other["id"]]
    assert chunk["state"] == "pending" and 4 <= waits(chunk) <= 10


@BACKOFF
def test_retrying_a_failed_job_runs_its_waiting_tasks_at_once(submit, claim, fail, client, headers):
    job = submit(manifest(2, max_attempts=2))
    first, second = claim(WORKER, capacity=2)
    fail(first)  # waits its backoff...
    fail(second, retryable=False)  # ...when its sibling fails the job and cancels it

    retried = client.post(f"/api/v1/jobs/{job['id']}/retry", headers=headers["user"])

    assert retried.status_code == 200
    assert sorted(t["task_id"] for t in claim(WORKER, capacity=2)) == sorted(
        [first["task_id"], second["task_id"]]
    )


@BACKOFF
def test_a_lost_lease_is_retried_at_once(submit, claim, rt):
    submit(manifest(1, max_attempts=3))
    [leased] = claim(WORKER)

    tasks.expire_leases(rt, now=datetime.now(UTC) + timedelta(minutes=5))

    assert [t["attempt"] for t in claim(WORKER)] == [leased["attempt"] + 1]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (-1, "Must be greater than or equal to 0"),
        (86_401, "less than or equal to 86400"),
        ("soon", "Not a valid number."),
        (True, "Not a valid number."),
        ("NaN", "not permitted"),
        ("Infinity", "not permitted"),
    ],
)
def test_a_retry_after_it_cannot_use_is_422_naming_it_and_the_lease_stands(
    submit, claim, task_call, task_row, value, problem
):
    submit(manifest(1, max_attempts=3))
    [leased] = claim(WORKER)

    response = task_call(leased["task_id"], "failure", failure(leased, retry_after_seconds=value))

    assert response.status_code == 422
    [message] = response.get_json()["error"]["details"]["fields"]["retry_after_seconds"]
    assert problem in message
    assert task_row(leased["task_id"])["status"] == "leased"
