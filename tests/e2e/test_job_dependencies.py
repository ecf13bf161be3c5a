"""A pipeline put together with the chunkwise command on the real stack: the second job's tasks
reach a worker's long poll once the first job has succeeded, and not before; and the command
lists the jobs waiting for one."""

from __future__ import annotations

import json
import threading

import pytest

from devstack.observe import FAST
from tests.e2e.test_cli import as_json, chunkwise
from tests.integration.manifests import manifest, result_body


@pytest.fixture
def stack_env() -> dict:
    """The fast stack, with a workload manifest jobs may use."""
    return {**FAST, "CHUNKWISE_ALLOWED_WORKLOADS": "echo"}


def test_a_job_enqueued_after_another_reaches_a_waiting_worker_once_the_first_succeeds(stack):
    job_file = stack.run_dir / "job.json"
    job_file.write_text(json.dumps(manifest(1)))
    worker = stack.api(stack.tokens.worker)

    def claim(wait_seconds: float) -> list[dict]:
        body = {"worker_id": "e2e", "workloads": ["echo"], "capacity": 5}
        answer = worker.post(
            f"{stack.url}/api/v1/tasks/claim",
            json={**body, "wait_seconds": wait_seconds},
            timeout=30,
        )
        return answer.json()["tasks"] if answer.status_code == 200 else []

    first = chunkwise(stack, "enqueue", str(job_file)).stdout.strip()
    second = chunkwise(stack, "enqueue", str(job_file), "--after", first).stdout.strip()
    [task] = claim(0)
    assert task["job_id"] == first and second != first
    assert claim(0) == []  # the second job's task waits

    woken: list[dict] = []
    poll = threading.Thread(target=lambda: woken.extend(claim(10)))
    poll.start()
    answer = worker.post(
        f"{stack.url}/api/v1/tasks/{task['task_id']}/result",
        json=result_body(task, worker_id="e2e"),
        timeout=10,
    )
    poll.join()

    assert answer.status_code == 200
    assert [t["job_id"] for t in woken] == [second]
    shown = chunkwise(stack, "status", second)
    assert f"depends on  {first}" in shown.stdout
    listed = as_json(chunkwise(stack, "jobs", "--depends-on", first, "--json"))
    assert [job["id"] for job in listed["jobs"]] == [second]
    assert as_json(chunkwise(stack, "status", first, "--json"))["status"] == "succeeded"
