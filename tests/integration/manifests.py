"""Manifest job bodies and worker calls, as the integration tests send them."""

from __future__ import annotations

import hashlib

WORKER = "worker-a"
OTHER_WORKER = "worker-b"
# The worker credential (api_tokens.id) that tests calling the services directly act under.
CREDENTIAL = 1


def sha256_of(text: str) -> str:
    """The 64-hex digest a manifest names for an input or a result."""
    return hashlib.sha256(text.encode()).hexdigest()


def manifest(chunks: int | list[int] = 1, **job: object) -> dict:
    """A manifest job body for the `echo` workload; a list of ints names the chunk indexes."""
    indexes = chunks if isinstance(chunks, list) else None
    count = len(chunks) if indexes is not None else chunks
    tasks = []
    for n in range(count):
        task = {
            "input_uri": f"s3://in/{n}",
            "input_sha256": sha256_of(f"in-{n}"),
            "parameters": {"n": n},
        }
        if indexes is not None:
            task["chunk_index"] = indexes[n]
        tasks.append(task)
    return {"workload": "echo", "input_uri": "s3://in/", "parameters": {}, "tasks": tasks, **job}


def result_body(claimed: dict, worker_id: str = WORKER, tag: str = "out") -> dict:
    """A result manifest for a claimed task under its own attempt."""
    uri = f"s3://out/{claimed['task_id']}/{tag}"
    return {
        "worker_id": worker_id,
        "attempt": claimed["attempt"],
        "lease_token": claimed["lease_token"],
        "result_uri": uri,
        "result_sha256": sha256_of(uri),
        "metrics": {"rows": 1},
    }


def batch_item(claimed: dict, worker_id: str = WORKER, tag: str = "out") -> dict:
    """An item of POST /api/v1/tasks/results for a claimed task under its own attempt."""
    body = result_body(claimed, worker_id, tag)
    del body["worker_id"]
    return {"task_id": claimed["task_id"], **body}
