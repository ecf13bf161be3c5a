"""Pipelines under concurrent traffic: random graphs of dependent jobs whose tasks succeed and
fail while their jobs are cancelled, retried and waited for by new jobs, from several
threads at once. Whatever the
interleaving, no request fails on the server, no transaction deadlocks, no job waits for a
failed one, no task waits for good, the queue's tallies hold, and draining the queue finishes
every job."""

from __future__ import annotations

import random
import threading

import pytest

from bench.reliability import invariants
from tests.integration.manifests import batch_item, manifest, result_body

JOBS = 60
THREADS = 4
ACTIONS = 40  # per thread
# What a request may answer in a storm: 409 for a task its job's cancel or failure took, a
# cancel of a finished job, a retry of one not failed or waiting for a failed one, a job
# submitted to wait for a failed one.
EXPECTED = {200, 201, 204, 409}


def random_graph(submit, rng: random.Random) -> list[dict]:
    """JOBS one-task jobs, each depending on up to three earlier ones."""
    made: list[dict] = []
    for _ in range(JOBS):
        prerequisites = rng.sample(made, k=min(len(made), rng.choice([0, 1, 1, 2, 3])))
        made.append(submit(manifest(1, depends_on=[p["id"] for p in prerequisites])))
    return made


def storm(app, headers: dict, jobs: list[dict], seed: int, statuses: list[int]) -> None:
    """One thread's random actions: finish what it claims (a quarter failing for good, the
    rest in one batch of results), cancel a job, submit one depending on others, or retry
    one."""
    client, rng, worker = app.test_client(), random.Random(seed), f"storm-{seed}"
    for _ in range(ACTIONS):
        roll = rng.random()
        if roll < 0.6:
            body = {"worker_id": worker, "workloads": ["echo"], "capacity": 3}
            answer = client.post("/api/v1/tasks/claim", json=body, headers=headers["worker"])
            statuses.append(answer.status_code)
            succeeded = []
            for task in answer.get_json()["tasks"] if answer.status_code == 200 else []:
                if rng.random() < 0.75:
                    succeeded.append(batch_item(task, worker))
                    continue
                failure = {
                    "worker_id": worker,
                    "attempt": task["attempt"],
                    "lease_token": task["lease_token"],
                    "error_code": "x",
                }
                path = f"/api/v1/tasks/{task['task_id']}/failure"
                answer = client.post(
                    path, json={**failure, "retryable": False}, headers=headers["worker"]
                )
                statuses.append(answer.status_code)
            if succeeded:
                batch = {"worker_id": worker, "results": succeeded}
                answer = client.post("/api/v1/tasks/results", json=batch, headers=headers["worker"])
                statuses.append(answer.status_code)
        elif 0.7 <= roll < 0.8:
            prerequisites = rng.sample(jobs, k=rng.choice([1, 2]))
            body = manifest(1, depends_on=[p["id"] for p in prerequisites])
            answer = client.post("/api/v1/jobs", json=body, headers=headers["user"])
            statuses.append(answer.status_code)
            if answer.status_code == 201:
                jobs.append(answer.get_json())
        else:
            verb = "cancel" if roll < 0.7 else "retry"
            path = f"/api/v1/jobs/{rng.choice(jobs)['id']}/{verb}"
            statuses.append(client.post(path, headers=headers["user"]).status_code)


def drain(client, headers: dict) -> None:
    """Complete every task there is to claim, until none is left."""
    body = {"worker_id": "drain", "workloads": ["echo"], "capacity": 50}
    while (
        answer := client.post("/api/v1/tasks/claim", json=body, headers=headers["worker"])
    ).status_code == 200:
        for task in answer.get_json()["tasks"]:
            path = f"/api/v1/tasks/{task['task_id']}/result"
            client.post(path, json=result_body(task, "drain"), headers=headers["worker"])


@pytest.mark.parametrize("seed", range(1, 6))
def test_a_storm_of_finishes_cancels_and_retries_leaves_no_job_waiting_for_good(
    seed, app, client, submit, headers, db, caplog
):
    jobs = random_graph(submit, random.Random(seed))  # and those the storm submits
    statuses: list[int] = []
    threads = [
        threading.Thread(target=storm, args=(app, headers, jobs, seed * 100 + n, statuses))
        for n in range(THREADS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert set(statuses) <= EXPECTED
    # Jobs of one graph are locked in one order: none of this is a deadlock run again.
    assert [r for r in caplog.records if getattr(r, "event", None) == "deadlock_rerun"] == []
    assert invariants.violations(db) == {}
    drain(client, headers)
    unfinished = db.execute(
        "SELECT count(*) AS n FROM jobs WHERE status NOT IN ('succeeded', 'failed', 'cancelled')"
    ).fetchone()["n"]
    assert unfinished == 0
    assert invariants.violations(db) == {}
