"""Real worker processes against real gunicorn and PostgreSQL: sharing, crashes, fencing, cancel.

Leases are 4 s and heartbeats 1 s (conftest.FAST), so a lost lease comes back within seconds.
"""

from __future__ import annotations

import time

import psutil
import pytest

from devstack.faults import SlowLink
from devstack.observe import (
    SHORT_POLL,
    big_csv,
    events,
    scrape,
    start_one_chunk_worker,
    totals_of,
    wait_for,
)
from devstack.sample_csv import generate_csv
from worker_cli.worker import CRASH_EXIT_STATUS


def attempts_by_worker(chunk: dict) -> list[tuple[str, str]]:
    """A chunk's attempts as (worker_id, outcome), oldest first."""
    return [(a["worker_id"], a["state"]) for a in chunk["attempts"]]


def leased_chunks(jobs, job_id: str) -> list[dict]:
    """The job's chunks that some worker holds right now."""
    return [c for c in jobs.chunks(job_id) if c["state"] == "leased"]


def test_two_workers_finish_a_multi_chunk_job_with_the_sequential_result(stack, jobs):
    data = generate_csv(20_003, seed=1)
    job = jobs.submit(data, 8)
    # Four chunks each: the job can only finish if both processes did their share.
    stack.start_worker("worker-a", *SHORT_POLL, "--capacity", "1", "--max-tasks", "4")
    stack.start_worker("worker-b", *SHORT_POLL, "--capacity", "1", "--max-tasks", "4")

    done = jobs.wait(job["id"], "succeeded", timeout=30)

    assert done["result"] == totals_of(data)
    accepted = [
        a["worker_id"]
        for c in jobs.chunks(job["id"])
        for a in c["attempts"]
        if a["state"] == "completed"
    ]
    assert sorted(accepted) == ["worker-a"] * 4 + ["worker-b"] * 4


def test_a_worker_process_runs_with_its_token_and_without_the_database_or_other_tokens(stack, jobs):
    job = jobs.submit(generate_csv(2_000, seed=2), 2)
    worker = stack.start_worker("worker-a", *SHORT_POLL, "--capacity", "2")

    jobs.wait(job["id"], "succeeded", timeout=30)

    environ = psutil.Process(worker.pid).environ()
    assert environ["CHUNKWISE_WORKER_TOKEN"] == stack.tokens.worker
    assert not [name for name in environ if "DATABASE_URL" in name or name.startswith("PG")]
    others = {stack.tokens.user, stack.tokens.operator, stack.tokens.metrics}
    assert others.isdisjoint(environ.values())


def test_chunk_of_a_crashed_worker_is_completed_by_the_other_after_its_lease_expires(stack, jobs):
    data = generate_csv(20_003, seed=2)
    job = jobs.submit(data, 4)
    crasher = start_one_chunk_worker(stack, "crasher", "crash-after-compute")
    assert crasher.wait(timeout=20) == CRASH_EXIT_STATUS
    first = jobs.chunks(job["id"])[0]
    assert (first["state"], first["lease_owner"]) == ("leased", "crasher")

    stack.start_worker("survivor", *SHORT_POLL, "--capacity", "2")
    done = jobs.wait(job["id"], "succeeded", timeout=30)

    assert done["result"] == totals_of(data)
    first = jobs.chunks(job["id"])[0]
    assert attempts_by_worker(first) == [("crasher", "lease_expired"), ("survivor", "completed")]
    assert events(stack, "crasher", "fault"), "the crasher never reached its fault"


def test_late_result_of_a_paused_worker_is_rejected_and_the_other_workers_summary_is_kept(
    stack, jobs, db
):
    data = generate_csv(20_003, seed=3)
    job = jobs.submit(data, 4)
    rejected_before = scrape(stack).value(
        "chunkwise_fenced_writes_rejected_total", endpoint="tasks.results"
    )
    # Silent for twice the lease: by the time it submits, its chunk belongs to someone else.
    sleeper = start_one_chunk_worker(stack, "sleeper", "pause-after-compute=8")
    wait_for(lambda: events(stack, "sleeper", "fault"), 20, what="the sleeper to pause")
    stack.start_worker("steady", *SHORT_POLL, "--capacity", "2")

    done = jobs.wait(job["id"], "succeeded", timeout=30)
    assert sleeper.wait(timeout=20) == 0

    assert done["result"] == totals_of(data)
    first = jobs.chunks(job["id"])[0]
    assert attempts_by_worker(first) == [("sleeper", "lease_expired"), ("steady", "completed")]
    refused = events(stack, "sleeper", "lease_lost", "dropped")
    assert [(line["event"], line.get("code")) for line in refused] == [
        ("lease_lost", "stale_attempt")
    ]
    assert not events(stack, "sleeper", "submitted")
    summary = db.execute(
        "SELECT attempt FROM chunk_summaries WHERE task_id = %s", (first["id"],)
    ).fetchone()
    assert summary["attempt"] == first["attempts"][1]["attempt"]
    assert (
        scrape(stack).value("chunkwise_fenced_writes_rejected_total", endpoint="tasks.results")
        == rejected_before + 1
    )


@pytest.fixture
def slow_link(stack):
    """The coordinator behind a 0.5 MB/s link."""
    link = SlowLink(stack.port, 500_000)
    yield link
    link.close()


def test_cancelling_a_job_stops_its_running_chunks(stack, jobs, db, slow_link):
    # Each chunk (about 2.4 MB) takes some 5 s to arrive over a 0.5 MB/s link, well past the
    # first heartbeat (1 s), which is when its worker hears of the cancel.
    job = jobs.submit(big_csv(400_000), 2)
    for name in ("worker-a", "worker-b"):
        stack.start_worker(name, *SHORT_POLL, "--capacity", "1", "--coordinator", slow_link.url)
    wait_for(
        lambda: len(leased_chunks(jobs, job["id"])) == 2,
        20,
        interval=0.05,
        what="both chunks to be leased",
    )

    cancelled_at = time.monotonic()
    response = jobs.session.post(f"{stack.url}/api/v1/jobs/{job['id']}/cancel", timeout=10)
    assert response.status_code == 200, response.text

    for name in ("worker-a", "worker-b"):
        stopped = wait_for(
            lambda name=name: events(stack, name, "dropped"), 5, what=f"{name} to stop its chunk"
        )
        assert stopped[0]["reason"] == "task_cancelled"
        assert not events(stack, name, "computed", "submitted"), "the chunk ran to its end"
    assert time.monotonic() - cancelled_at < 5
    time.sleep(1.5)  # a result that was still on its way would have landed by now
    final = jobs.get(job["id"])
    assert (final["status"], final["result"], final["partial_result"]) == ("cancelled", None, None)
    assert all(c["state"] == "cancelled" for c in jobs.chunks(job["id"]))
    assert db.execute("SELECT count(*) AS n FROM chunk_summaries").fetchone()["n"] == 0
