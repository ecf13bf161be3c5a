"""Pipelines under concurrent traffic: random graphs of dependent jobs whose tasks succeed and
fail while their jobs are cancelled, retried and waited for by new jobs, from several
threads at once. Whatever the interleaving, no request fails on the server (a deadlock's
victim is run again), no job waits for a failed one, no task waits for good, the queue's
tallies hold, and draining the queue finishes every job."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

import pytest

from bench.reliability import invariants
from tests.integration.manifests import batch_item, manifest, result_body


@dataclass(frozen=True)
class Shape:
    """How big a storm is: jobs in its graph, threads, and actions a thread takes."""

    jobs: int
    threads: int
    actions: int


# Wide: a large graph, few collisions. Dense: eight threads on fifteen jobs, where a lock
# taken out of order meets its opposite within a few seeds (cancel against retry, retry
# against an admission waiting for the jobs it brings back).
WIDE = Shape(jobs=60, threads=4, actions=40)
DENSE = Shape(jobs=15, threads=8, actions=60)
# What a request may answer in a storm: 409 for a task its job's cancel or failure took, a
# cancel of a finished job, a retry of one not failed or waiting for a failed one, a job
# submitted to wait for a failed one.
EXPECTED = {200, 201, 204, 409}


class Recording:
    """A test client that keeps each POST's status, path and error body."""

    def __init__(self, client, answers: list[tuple]):
        self._client, self._answers = client, answers

    def post(self, path: str, **kwargs):
        answer = self._client.post(path, **kwargs)
        error = answer.get_json().get("error") if answer.is_json and answer.content_length else None
        self._answers.append((answer.status_code, path, error))
        return answer


def random_graph(submit, rng: random.Random, jobs: int) -> list[dict]:
    """One-task jobs, each depending on up to three earlier ones."""
    made: list[dict] = []
    for _ in range(jobs):
        prerequisites = rng.sample(made, k=min(len(made), rng.choice([0, 1, 1, 2, 3])))
        made.append(submit(manifest(1, depends_on=[p["id"] for p in prerequisites])))
    return made


def storm(
    app, headers: dict, jobs: list[dict], seed: int, actions: int, answers: list[tuple]
) -> None:
    """One thread's random actions: finish what it claims (a quarter failing for good, the
    rest in one batch of results), cancel a job, submit one depending on others, or retry
    one. Each answer is kept as (status, path, error body)."""
    client, rng = Recording(app.test_client(), answers), random.Random(seed)
    worker = f"storm-{seed}"
    for _ in range(actions):
        roll = rng.random()
        if roll < 0.6:
            body = {"worker_id": worker, "workloads": ["echo"], "capacity": 3}
            answer = client.post("/api/v1/tasks/claim", json=body, headers=headers["worker"])
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
                client.post(path, json={**failure, "retryable": False}, headers=headers["worker"])
            if succeeded:
                batch = {"worker_id": worker, "results": succeeded}
                client.post("/api/v1/tasks/results", json=batch, headers=headers["worker"])
        elif 0.7 <= roll < 0.8:
            prerequisites = rng.sample(jobs, k=rng.choice([1, 2]))
            body = manifest(1, depends_on=[p["id"] for p in prerequisites])
            answer = client.post("/api/v1/jobs", json=body, headers=headers["user"])
            if answer.status_code == 201:
                jobs.append(answer.get_json())
        else:
            verb = "cancel" if roll < 0.7 else "retry"
            path = f"/api/v1/jobs/{rng.choice(jobs)['id']}/{verb}"
            client.post(path, headers=headers["user"])


def drain(client, headers: dict) -> None:
    """Complete every task there is to claim, until none is left."""
    body = {"worker_id": "drain", "workloads": ["echo"], "capacity": 50}
    while (
        answer := client.post("/api/v1/tasks/claim", json=body, headers=headers["worker"])
    ).status_code == 200:
        for task in answer.get_json()["tasks"]:
            path = f"/api/v1/tasks/{task['task_id']}/result"
            client.post(path, json=result_body(task, "drain"), headers=headers["worker"])


@pytest.mark.parametrize(
    ("shape", "seed"),
    [pytest.param(WIDE, seed, id=f"wide-{seed}") for seed in range(1, 6)]
    + [pytest.param(DENSE, seed, id=f"dense-{seed}") for seed in range(1, 11)],
)
def test_a_storm_of_finishes_cancels_and_retries_leaves_no_job_waiting_for_good(
    shape, seed, app, client, submit, headers, db
):
    jobs = random_graph(submit, random.Random(seed), shape.jobs)  # and those the storm submits
    answers: list[tuple] = []
    threads = [
        threading.Thread(
            target=storm, args=(app, headers, jobs, seed * 100 + n, shape.actions, answers)
        )
        for n in range(shape.threads)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # A deadlock the lock order leaves (services/deadlocks.py) is run again, never answered.
    assert [a for a in answers if a[0] not in EXPECTED] == []
    assert invariants.violations(db) == {}
    drain(client, headers)
    unfinished = db.execute(
        "SELECT count(*) AS n FROM jobs WHERE status NOT IN ('succeeded', 'failed', 'cancelled')"
    ).fetchone()["n"]
    assert unfinished == 0
    assert invariants.violations(db) == {}
