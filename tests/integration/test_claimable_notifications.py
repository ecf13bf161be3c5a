"""The claim and job channels are announced by triggers, whichever code path changed a task."""

from __future__ import annotations

from uuid import UUID

import psycopg
import pytest

from repositories import channels
from repositories import tasks as task_rows
from tests.integration.manifests import WORKER, manifest


@pytest.fixture
def notifications(database_url):
    """The (channel, payload) notifications that arrived since the last call."""
    conn = psycopg.connect(database_url, autocommit=True)
    channels.listen(conn)

    def arrived() -> list[tuple[str, str]]:
        return [(n.channel, n.payload) for n in conn.notifies(timeout=0.2)]

    yield arrived
    conn.close()


@pytest.fixture
def announcements(notifications):
    """How many chunkwise_claimable notifications arrived since the last call."""
    return lambda: sum(1 for channel, _ in notifications() if channel == channels.CLAIMABLE)


def test_a_new_job_announces_claimable_tasks(submit, announcements):
    submit(manifest(3))
    assert announcements() == 1  # one transaction: its repeats fold into one


def test_a_claim_announces_nothing(submit, claim, announcements):
    submit(manifest(2))
    announcements()
    assert claim(WORKER, capacity=2)
    assert announcements() == 0


def failure_body(task: dict, retryable: bool) -> dict:
    """A failure report for a claimed task under its own lease."""
    return {
        "worker_id": WORKER,
        "attempt": task["attempt"],
        "lease_token": task["lease_token"],
        "error_code": "boom",
        "error_message": "",
        "retryable": retryable,
        "details": {},
    }


def result_body(task: dict) -> dict:
    """A result for a claimed task under its own lease."""
    return {
        "worker_id": WORKER,
        "attempt": task["attempt"],
        "lease_token": task["lease_token"],
        "result_uri": "s3://out",
        "result_sha256": "a" * 64,
    }


def test_a_retried_task_is_announced(submit, claim, task_call, announcements):
    submit(manifest(1))
    (task,) = claim(WORKER)
    announcements()

    assert task_call(task["task_id"], "failure", failure_body(task, True)).status_code == 200
    assert announcements() == 1


def test_an_ended_lease_of_an_uncapped_workload_is_not_announced(
    submit, claim, task_call, announcements
):
    submit(manifest(2))
    done, failed = claim(WORKER, capacity=2)
    announcements()

    # Nothing became claimable: waking every waiting claim would only make each find nothing.
    assert task_call(done["task_id"], "result", result_body(done)).status_code == 200
    assert task_call(failed["task_id"], "failure", failure_body(failed, False)).status_code == 200
    assert announcements() == 0


def test_an_ended_lease_of_a_capped_workload_is_announced(
    submit, claim, task_call, db, announcements
):
    submit(manifest(2))
    done, failed = claim(WORKER, capacity=2)
    db.execute("UPDATE workloads SET max_leases_total = 10 WHERE name = 'echo'")
    announcements()

    # Each frees room under the cap, which a waiting claim may be held back by.
    assert task_call(done["task_id"], "result", result_body(done)).status_code == 200
    assert announcements() == 1
    assert task_call(failed["task_id"], "failure", failure_body(failed, False)).status_code == 200
    assert announcements() == 1


def test_a_claim_announces_each_job_whose_tasks_it_leased(submit, claim, notifications):
    first, second = submit(manifest(3)), submit(manifest(3))
    notifications()

    assert len(claim(WORKER, capacity=6)) == 6

    changed = [payload for channel, payload in notifications() if channel == channels.JOB_CHANGED]
    assert set(changed) == {first["id"], second["id"]}


def test_a_heartbeat_announces_nothing(submit, claim, task_call, notifications):
    submit(manifest(1))
    (task,) = claim(WORKER)
    notifications()

    beat = {
        "worker_id": WORKER,
        "attempt": task["attempt"],
        "lease_token": task["lease_token"],
        "checkpoint": {"row": 1},
    }
    assert task_call(task["task_id"], "heartbeat", beat).status_code == 200

    assert notifications() == []


def test_a_batch_of_results_announces_its_job_once_and_no_claimable_change(
    submit, claim, client, headers, notifications
):
    job = submit(manifest(3))
    tasks = claim(WORKER, capacity=3)
    notifications()
    results = [
        {
            "task_id": t["task_id"],
            "attempt": t["attempt"],
            "lease_token": t["lease_token"],
            "result_uri": "s3://out",
            "result_sha256": "a" * 64,
        }
        for t in tasks
    ]

    response = client.post(
        "/api/v1/tasks/results",
        json={"worker_id": WORKER, "results": results},
        headers=headers["worker"],
    )

    assert response.status_code == 200
    arrived = notifications()
    assert arrived.count((channels.JOB_CHANGED, job["id"])) == 1
    assert [c for c, _ in arrived].count(channels.CLAIMABLE) == 0


def test_tasks_let_go_when_their_jobs_prerequisites_succeed_are_announced(
    submit, claim, rt, announcements
):
    first = submit(manifest(1))
    waiting = submit(manifest(2, depends_on=[first["id"]]))
    claim(WORKER)
    with rt.pool.connection() as conn:
        conn.execute("UPDATE jobs SET status = 'succeeded' WHERE id = %s", (first["id"],))
    announcements()

    with rt.pool.connection() as conn:
        # No task changes status here, so no trigger speaks: the release must.
        assert task_rows.release_blocked(conn, [UUID(waiting["id"])]) == 2

    assert announcements() == 1
