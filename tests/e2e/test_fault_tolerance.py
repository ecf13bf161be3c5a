"""Faults on the real stack: crashed and stale workers, dead coordinators, a full queue, cancel.

The data set has empty values, negative numbers, quoted fields with line breaks inside, and a
last chunk shorter than the others (20,003 records in 8 chunks). Every wait goes through
jobs.wait, which also checks that progress never goes down and that a succeeded job holds
exactly one accepted summary per chunk.
"""

from __future__ import annotations

import csv
import hashlib
import io
import signal
import threading
import time
from datetime import UTC, datetime

import pytest

from devstack.faults import HOLD_MERGE_SQL, MERGE_HOLD, RELEASE_MERGE_SQL
from devstack.observe import (
    FAST,
    SHORT_POLL,
    big_csv,
    events,
    start_one_chunk_worker,
    totals_of,
    wait_for,
)
from devstack.sample_csv import generate_csv
from services import csvstats
from services.archive import archive_path
from worker_cli.worker import CRASH_EXIT_STATUS

RECORDS, CHUNKS = 20_003, 8
DEFAULT_TIMINGS = {"CHUNKWISE_MAINTENANCE_SECONDS": "5", "CHUNKWISE_LOG_LEVEL": "INFO"}


@pytest.fixture
def data() -> bytes:
    """The shared data set: 20,003 records, the last of 8 chunks short."""
    return generate_csv(RECORDS, seed=11)


def attempts_by_worker(chunk: dict) -> list[tuple[str, str]]:
    """A chunk's attempts as (worker_id, outcome), oldest first."""
    return [(a["worker_id"], a["state"]) for a in chunk["attempts"]]


def outbox_events(db, job_id: str) -> list[str]:
    """The job's outbox events, in order."""
    rows = db.execute("SELECT event FROM outbox WHERE job_id = %s ORDER BY id", (job_id,))
    return [r["event"] for r in rows.fetchall()]


def job_row(db, job_id: str) -> dict:
    """The job's row as stored."""
    return db.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()


def test_the_data_set_has_the_shapes_the_faults_are_tested_on(data):
    split = csvstats.split(data, "value", ",", CHUNKS)
    sizes = [p.record_end - p.record_start for p in split.plans]
    assert len(sizes) == CHUNKS and sizes[-1] < sizes[0]
    rows = list(csv.reader(io.StringIO(data.decode(), newline="")))[1:]
    values = [row[2].strip() for row in rows]
    assert "" in values and any(v.startswith("-") for v in values)
    assert any("\n" in row[3] for row in rows), "no quoted field spans lines"


def test_crashed_and_stale_workers_do_not_change_the_sequential_result(stack, jobs, db, data):
    job = jobs.submit(data, CHUNKS, key="faults-1")
    assert jobs.post(data, CHUNKS, key="faults-1").json()["id"] == job["id"]

    # Chunk 0: computed, then the worker dies before committing it.
    crasher = start_one_chunk_worker(stack, "crasher", "crash-after-compute")
    assert crasher.wait(timeout=20) == CRASH_EXIT_STATUS
    # Chunk 1: computed, then the worker goes silent past its lease and submits late.
    sleeper = start_one_chunk_worker(stack, "sleeper", "pause-after-compute=8")
    wait_for(lambda: events(stack, "sleeper", "fault"), 20, what="the sleeper to pause")
    stack.start_worker("steady", *SHORT_POLL, "--capacity", "2")
    replay = jobs.post(data, CHUNKS, key="faults-1")
    assert (replay.status_code, replay.json()["id"]) == (200, job["id"])

    done = jobs.wait(job["id"], "succeeded", timeout=40)
    assert sleeper.wait(timeout=20) == 0

    assert done["result"] == totals_of(data)
    chunks = jobs.chunks(job["id"])
    assert attempts_by_worker(chunks[0]) == [("crasher", "lease_expired"), ("steady", "completed")]
    assert attempts_by_worker(chunks[1]) == [("sleeper", "lease_expired"), ("steady", "completed")]
    assert [
        (e["event"], e.get("code")) for e in events(stack, "sleeper", "lease_lost", "dropped")
    ] == [("lease_lost", "stale_attempt")]
    accepted = db.execute(
        "SELECT chunk_index, attempt FROM chunk_summaries WHERE job_id = %s ORDER BY chunk_index",
        (job["id"],),
    ).fetchall()
    assert [(r["chunk_index"], r["attempt"]) for r in accepted] == [
        (c["index"], c["attempt"]) for c in chunks
    ]
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 1


def test_malformed_record_fails_its_job_naming_the_record_and_line(stack, jobs):
    data = generate_csv(RECORDS, seed=11, malformed_at=12_345)
    with pytest.raises(csvstats.BadRecord) as control:
        csvstats.sequential_totals(data, "value")
    bad = control.value.record
    job = jobs.submit(data, CHUNKS)
    stack.start_worker("worker", *SHORT_POLL, "--capacity", "2")

    failed = jobs.wait(job["id"], timeout=30)

    assert failed["status"] == "failed" and failed["result"] is None
    assert failed["error"]["code"] == "invalid_input"
    assert f"record {bad.record} (line {bad.line})" in failed["error"]["message"]
    assert (failed["error"]["details"]["record"], failed["error"]["details"]["line"]) == (
        bad.record,
        bad.line,
    )
    assert bad.line > bad.record + 1, "the quoted line breaks should push lines past records"


def test_repeating_a_submission_with_its_idempotency_key_returns_the_same_job(
    stack, jobs, db, data
):
    answers = [jobs.post(data, CHUNKS, key="same-request") for _ in range(3)]

    assert [a.status_code for a in answers] == [201, 200, 200]
    assert len({a.json()["id"] for a in answers}) == 1
    assert db.execute("SELECT count(*) AS n FROM tasks").fetchone()["n"] == CHUNKS
    stack.start_worker("worker", *SHORT_POLL, "--capacity", "2")
    job_id = answers[0].json()["id"]
    jobs.wait(job_id, "succeeded", timeout=30)
    late = jobs.post(data, CHUNKS, key="same-request")
    assert (late.status_code, late.json()["id"], late.json()["status"]) == (
        200,
        job_id,
        "succeeded",
    )


@pytest.mark.slow
@pytest.mark.parametrize("stack_env", [DEFAULT_TIMINGS], ids=["default-timings"])
def test_lost_lease_is_recovered_within_40_seconds_with_the_default_timings(stack, jobs, db):
    data = generate_csv(5_000, seed=12)
    job = jobs.submit(data, 1)
    # The victim holds its lease and stays quiet until it is killed.
    stack.start_worker(
        "victim", *SHORT_POLL, "--capacity", "1", "--fault", "pause-after-compute=300"
    )
    wait_for(lambda: events(stack, "victim", "fault"), 20, what="the victim to hold its lease")
    stack.start_worker("rescuer", *SHORT_POLL, "--capacity", "1")

    killed_at, killed_clock = datetime.now(UTC), time.monotonic()
    stack.kill("victim", signal.SIGKILL)
    wait_for(
        lambda: len(jobs.chunks(job["id"])[0]["attempts"]) == 2,
        45,
        interval=0.25,
        what="the chunk to be leased again",
    )
    observed = time.monotonic() - killed_clock

    again = jobs.chunks(job["id"])[0]["attempts"][1]
    assert again["worker_id"] == "rescuer"
    assert (datetime.fromisoformat(again["started_at"]) - killed_at).total_seconds() <= 40
    assert observed <= 40
    done = jobs.wait(job["id"], "succeeded", timeout=20)
    assert done["result"] == totals_of(data)


def test_merge_cut_short_by_a_coordinator_kill_is_finished_by_the_next_coordinator(
    stack, jobs, db, data
):
    # The merge will wait inside its transaction, job row locked (devstack.faults.MERGE_HOLD).
    db.execute(HOLD_MERGE_SQL)
    db.execute("SELECT pg_advisory_lock(%s)", (MERGE_HOLD,))
    job = jobs.submit(data, CHUNKS)
    stack.start_worker("worker-a", *SHORT_POLL, "--capacity", "2")
    stack.start_worker("worker-b", *SHORT_POLL, "--capacity", "2")

    def merge_blocked() -> bool:
        waiting = db.execute(
            "SELECT count(*) AS n FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
            "WHERE d.datname = current_database() AND l.locktype = 'advisory' "
            "AND l.objid = %s AND NOT l.granted",
            (MERGE_HOLD,),
        ).fetchone()["n"]
        row = job_row(db, job["id"])
        done = db.execute(
            "SELECT count(*) AS n FROM tasks WHERE job_id = %s AND status = 'completed'",
            (job["id"],),
        ).fetchone()["n"]
        return waiting > 0 and row["status"] == "merging" and done == CHUNKS

    wait_for(merge_blocked, 30, interval=0.05, what="the merge to block mid-transaction")
    stack.kill("coordinator", signal.SIGKILL)
    db.execute("SELECT pg_advisory_unlock(%s)", (MERGE_HOLD,))
    db.execute(RELEASE_MERGE_SQL)
    assert job_row(db, job["id"])["status"] == "merging"

    stack.start_coordinator("coordinator-2")
    done = jobs.wait(job["id"], "succeeded", timeout=20)

    assert done["result"] == totals_of(data)
    assert outbox_events(db, job["id"]).count("job.succeeded") == 1


def test_coordinator_killed_right_after_the_merge_commit_merges_nothing_again(
    stack, jobs, db, data
):
    job = jobs.submit(data, CHUNKS)
    stack.start_worker("worker-a", *SHORT_POLL, "--capacity", "2")
    stack.start_worker("worker-b", *SHORT_POLL, "--capacity", "2")
    wait_for(
        lambda: job_row(db, job["id"])["status"] == "succeeded",
        30,
        interval=0.01,
        what="the merge to commit",
    )
    stack.kill("coordinator", signal.SIGKILL)
    merged = job_row(db, job["id"])

    stack.start_coordinator("coordinator-2")
    time.sleep(2)  # four maintenance passes of the new coordinator
    again = jobs.wait(job["id"], "succeeded", timeout=10)

    assert again["result"] == merged["result"] == totals_of(data)
    after = job_row(db, job["id"])
    assert (after["revision"], after["merge_seconds"], after["completed_at"]) == (
        merged["revision"],
        merged["merge_seconds"],
        merged["completed_at"],
    )
    assert outbox_events(db, job["id"]).count("job.succeeded") == 1


# One user fills the whole queue here, so no user's share (a quarter by default) stops it first.
@pytest.mark.parametrize(
    "stack_env", [{**FAST, "CHUNKWISE_USER_MAX_QUEUED_PERCENT": "100"}], ids=["one-user-queue"]
)
def test_submission_peak_beyond_the_queue_limit_rejects_one_job_without_a_trace(stack, jobs, db):
    # Five jobs of 64 chunks against the default limit of 256 queued chunks: four fit.
    uploads = [generate_csv(640, seed=20 + n) for n in range(5)]
    answers: list = [None] * 5
    start = threading.Barrier(5)

    def submit(n: int) -> None:
        session = stack.api()
        start.wait()
        answers[n] = jobs.post(uploads[n], 64, session=session)

    threads = [threading.Thread(target=submit, args=(n,)) for n in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    statuses = sorted(a.status_code for a in answers)
    assert statuses == [201, 201, 201, 201, 429], [a.text for a in answers]
    refused = next(n for n, a in enumerate(answers) if a.status_code == 429)
    assert answers[refused].json()["error"]["code"] == "queue_full"
    assert answers[refused].headers["Retry-After"]
    digest = hashlib.sha256(uploads[refused]).hexdigest()
    assert (
        db.execute("SELECT count(*) AS n FROM jobs WHERE input_sha256 = %s", (digest,)).fetchone()[
            "n"
        ]
        == 0
    )
    assert db.execute("SELECT count(*) AS n FROM tasks").fetchone()["n"] == 256
    assert db.execute("SELECT count(*) AS n FROM outbox").fetchone()["n"] == 4
    assert not archive_path(stack.run_dir / "archive", digest).exists()

    for name in ("worker-a", "worker-b", "worker-c"):
        stack.start_worker(name, *SHORT_POLL, "--capacity", "2")
    for n, answer in enumerate(answers):
        if n != refused:
            done = jobs.wait(answer.json()["id"], "succeeded", timeout=45)
            assert done["result"] == totals_of(uploads[n])


def test_cancel_during_a_run_stops_running_chunks_and_publishes_no_partial_result(stack, jobs, db):
    # Three chunks of 400,000 records: one finishes first, then the other two are cancelled
    # while they run, so there is an accepted summary a partial result could be made from.
    job = jobs.submit(big_csv(1_200_000), 3)
    first = stack.start_worker("first", *SHORT_POLL, "--capacity", "1", "--max-tasks", "1")
    assert first.wait(timeout=30) == 0
    # Each holds its computed chunk 2 s before submitting it: the engine computes 400,000
    # records in about 0.1 s, so without the pause a result could land before the cancel.
    for name in ("worker-a", "worker-b"):
        stack.start_worker(name, *SHORT_POLL, "--capacity", "1", "--fault", "pause-after-compute=2")
    wait_for(
        lambda: [c["state"] for c in jobs.chunks(job["id"])] == ["completed", "leased", "leased"],
        20,
        interval=0.05,
        what="chunks 1 and 2 to run",
    )

    response = jobs.session.post(f"{stack.url}/api/v1/jobs/{job['id']}/cancel", timeout=10)
    assert response.status_code == 200, response.text

    for name in ("worker-a", "worker-b"):
        stopped = wait_for(
            lambda name=name: events(stack, name, "dropped", "lease_lost"),
            5,
            what=f"{name} to stop its chunk",
        )
        assert stopped[0].get("reason", stopped[0].get("code")) == "task_cancelled"
    time.sleep(1.5)  # a result that was still on its way would have landed by now
    final = jobs.get(job["id"])
    assert (final["status"], final["result"], final["partial_result"]) == ("cancelled", None, None)
    row = job_row(db, job["id"])
    assert (row["result"], row["partial_result"]) == (None, None)
    assert [c["state"] for c in jobs.chunks(job["id"])] == ["completed", "cancelled", "cancelled"]
    accepted = db.execute(
        "SELECT chunk_index FROM chunk_summaries WHERE job_id = %s", (job["id"],)
    ).fetchall()
    assert [r["chunk_index"] for r in accepted] == [0]
    assert "job.cancelled" in outbox_events(db, job["id"])
