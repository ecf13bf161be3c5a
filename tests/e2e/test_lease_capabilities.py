"""Issue 37 reproduced on the real stack: a second worker credential, knowing a running
chunk's worker id and attempt, can neither read, checkpoint, fail nor complete it."""

from __future__ import annotations

import subprocess

import pytest

from devstack.observe import FAST, SHORT_POLL, events, totals_of, wait_for
from devstack.sample_csv import generate_csv
from devstack.stack import BIN, REPO

GUESS = "cwl_" + "0" * 64  # well formed, so what refuses it is the lease, not the schema


@pytest.fixture
def stack_env() -> dict:
    """Leases long enough to outlast the victim's pause (which sends no heartbeats)."""
    return {**FAST, "CHUNKWISE_LEASE_SECONDS": "30"}


def issue_worker_token(stack, name: str) -> str:
    """`flask --app app issue-worker-token NAME`, as the security review ran it."""
    done = subprocess.run(
        [str(BIN / "flask"), "--app", "app", "issue-worker-token", name],
        cwd=REPO,
        env=stack.base_env(),
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


def attack(stack, token: str, worker_id: str, chunk: dict) -> list:
    """Every call the review made against another worker's lease; their responses."""
    session = stack.api(token)
    tasks = f"{stack.url}/api/v1/tasks/{chunk['id']}"
    lease = {"worker_id": worker_id, "attempt": chunk["attempt"], "lease_token": GUESS}
    forged = {"digest": "0" * 64, "records": 1, "count": 1, "sum": "999999"}
    return [
        session.get(
            f"{tasks}/input",
            params={"worker_id": worker_id, "attempt": chunk["attempt"]},
            headers={"Chunkwise-Lease-Token": GUESS},
            timeout=10,
        ),
        session.post(
            f"{tasks}/heartbeat", json={**lease, "checkpoint": {"planted": True}}, timeout=10
        ),
        session.post(
            f"{tasks}/failure",
            json={**lease, "error_code": "sabotage", "retryable": False},
            timeout=10,
        ),
        # Twice, as the review did: the first refusal must not teach the second try anything.
        session.post(f"{tasks}/result", json={**lease, "summary": forged}, timeout=10),
        session.post(
            f"{tasks}/result",
            json={**lease, "summary": {**forged, "digest": chunk["input_sha256"]}},
            timeout=10,
        ),
    ]


def test_a_second_worker_credential_cannot_touch_a_running_chunks_lease(stack, jobs):
    data = generate_csv(2_000, seed=37)
    job = jobs.submit(data, 1)
    # The victim computes its chunk, then holds the lease while it is attacked.
    victim = stack.start_worker(
        "victim", *SHORT_POLL, "--capacity", "1", "--max-tasks", "1",
        "--fault", "pause-after-compute=5",
    )  # fmt: skip
    wait_for(lambda: events(stack, "victim", "fault"), 20, what="the victim to hold its lease")
    [chunk] = jobs.chunks(job["id"])
    assert (chunk["state"], chunk["lease_owner"]) == ("leased", "victim")
    rogue = issue_worker_token(stack, "rogue")

    as_the_victim = attack(stack, rogue, "victim", chunk)
    as_itself = attack(stack, rogue, "rogue", chunk)

    for response in as_the_victim:
        assert response.status_code == 403, response.text
        assert response.json()["error"]["code"] == "worker_id_taken"
    for response in as_itself:
        assert response.status_code == 409, response.text
        assert response.json()["error"]["details"] == {"task_id": chunk["id"]}
    for response in as_the_victim + as_itself:
        assert "current_attempt" not in response.text
    after = jobs.chunk(job["id"], chunk["id"])
    assert (after["state"], after["attempt"], after["checkpoint"]) == ("leased", 1, None)

    done = jobs.wait(job["id"], "succeeded", timeout=30)

    assert victim.wait(timeout=20) == 0
    assert done["result"] == totals_of(data)
    chunk = jobs.chunk(job["id"], chunk["id"])
    assert [(a["worker_id"], a["state"]) for a in chunk["attempts"]] == [("victim", "completed")]
    assert chunk["checkpoint"] != {"planted": True}
