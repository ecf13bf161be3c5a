"""Cancelling and retrying CSV jobs: fencing, the cancel/merge race, kept summaries, progress."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from devstack.sample_csv import generate_csv
from services import csvstats, tasks
from tests.integration.csv_worker import CsvWorker, get_job, row_counts, submit

DATA = generate_csv(400, seed=11)
RACE_ROUNDS = 20
CANCEL_STEP = 0.002  # seconds; 20 rounds sweep about as long as a result request takes


@pytest.fixture
def app_config(app_config):
    """max_attempts above the class budgets, as in production-like settings."""
    return {**app_config, "CHUNKWISE_MAX_ATTEMPTS": "5"}


def later() -> datetime:
    """A moment after every lease granted now has run out."""
    return datetime.now(UTC) + timedelta(minutes=5)


def traceparent() -> tuple[str, dict]:
    """A fresh trace id and the W3C header that carries it."""
    trace_id = uuid.uuid4().hex
    return trace_id, {"traceparent": f"00-{trace_id}-{'ab' * 8}-01"}


def cancel(client, headers: dict, job_id: str, **extra: str):
    """POST .../cancel."""
    return client.post(f"/api/v1/jobs/{job_id}/cancel", headers={**headers, **extra})


def retry(client, headers: dict, job_id: str, **extra: str):
    """POST .../retry."""
    return client.post(f"/api/v1/jobs/{job_id}/retry", headers={**headers, **extra})


def stored_outcome(db, job_id: str) -> dict:
    """The job's status and what it holds as its answer, as PostgreSQL has them."""
    return db.execute(
        "SELECT status, result, partial_result FROM jobs WHERE id = %s", (job_id,)
    ).fetchone()


def exhaust_read_retries(worker: CsvWorker, task: dict) -> dict:
    """Report a chunk unreadable until its input_unavailable budget is spent."""
    while worker.report_unreadable(task).get_json()["status"] == "pending":
        task = worker.claim_one()
    return task


# --- cancel -----------------------------------------------------------------------------------


def test_cancelling_a_queued_job_cancels_every_chunk_and_leaves_no_result(
    client, headers, db, worker
):
    job = submit(client, headers["user"], DATA, chunks=4)

    response = cancel(client, headers["user"], job["id"])

    assert response.status_code == 200
    body = response.get_json()
    assert (body["status"], body["result"], body["partial_result"]) == ("cancelled", None, None)
    assert body["chunks_by_state"]["cancelled"] == 4
    assert stored_outcome(db, job["id"]) == {
        "status": "cancelled",
        "result": None,
        "partial_result": None,
    }
    assert worker.claim() == []


def test_cancelling_a_running_job_fences_its_lease_holder_with_task_cancelled(
    client, headers, db, worker
):
    job = submit(client, headers["user"], DATA, chunks=4)
    assert worker.run(worker.claim_one()).status_code == 200
    held = worker.claim_one()
    summary = worker.summarise(held).to_dict()

    response = cancel(client, headers["user"], job["id"])

    assert response.status_code == 200
    assert response.get_json()["status"] == "cancelled"
    late = [
        worker.report_result(held, summary),
        worker.heartbeat(held),
        worker.report_unreadable(held),
        worker.read_input(held),
    ]
    for answer in late:
        assert answer.status_code == 409
        assert answer.get_json()["error"]["code"] == "task_cancelled"
    shown = get_job(client, headers["user"], job["id"])
    assert (shown["status"], shown["result"], shown["partial_result"]) == ("cancelled", None, None)
    assert stored_outcome(db, job["id"]) == {
        "status": "cancelled",
        "result": None,
        "partial_result": None,
    }
    assert [
        r["chunk_index"]
        for r in db.execute(
            "SELECT chunk_index FROM chunk_summaries ORDER BY chunk_index"
        ).fetchall()
    ] == [0]
    assert [
        r["outcome"]
        for r in db.execute(
            "SELECT outcome FROM task_attempts WHERE task_id = %s", (held["task_id"],)
        )
    ] == ["cancelled"]


def test_cancelling_a_cancelled_job_again_is_a_no_op(client, headers, db):
    job = submit(client, headers["user"], DATA, chunks=4)
    first = cancel(client, headers["user"], job["id"]).get_json()
    before = row_counts(db)

    again = cancel(client, headers["user"], job["id"])

    assert again.status_code == 200
    assert again.get_json()["status"] == "cancelled"
    assert again.get_json()["revision"] == first["revision"]
    assert row_counts(db) == before


def test_a_succeeded_job_cannot_be_cancelled(client, headers, db, worker):
    job = submit(client, headers["user"], DATA, chunks=4)
    worker.drain()
    before = stored_outcome(db, job["id"])

    response = cancel(client, headers["user"], job["id"])

    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "not_cancellable"
    assert stored_outcome(db, job["id"]) == before
    assert before["status"] == "succeeded" and before["result"] is not None


def test_cancel_racing_the_last_chunk_ends_in_exactly_one_outcome(app, headers, db):
    expected = csvstats.sequential_totals(DATA, "value").to_dict()
    for round_ in range(RACE_ROUNDS):
        setup = CsvWorker(app.test_client(), headers["worker"], "csv-a")
        job = submit(app.test_client(), headers["user"], DATA, chunks=2)
        assert setup.run(setup.claim_one()).status_code == 200
        last = setup.claim_one()
        summary = setup.summarise(last).to_dict()
        barrier = threading.Barrier(2)
        answers: dict[str, object] = {}

        def complete_last(last=last, summary=summary, answers=answers, barrier=barrier):
            finisher = CsvWorker(app.test_client(), headers["worker"], "csv-a")
            barrier.wait()
            answers["result"] = finisher.report_result(last, summary)

        def cancel_job(job=job, answers=answers, barrier=barrier, delay=round_ * CANCEL_STEP):
            client = app.test_client()
            barrier.wait()
            time.sleep(delay)  # sweep the cancel across the whole of the result's request
            answers["cancel"] = cancel(client, headers["user"], job["id"])

        threads = [threading.Thread(target=complete_last), threading.Thread(target=cancel_job)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)

        stored = stored_outcome(db, job["id"])
        result_status, cancel_status = (
            answers["result"].status_code,
            answers["cancel"].status_code,
        )
        if stored["status"] == "succeeded":
            assert stored["result"] == expected
            assert (result_status, cancel_status) == (200, 409)
            assert answers["cancel"].get_json()["error"]["code"] == "not_cancellable"
        else:
            assert stored == {"status": "cancelled", "result": None, "partial_result": None}
            assert cancel_status == 200
            assert result_status in (200, 409)
            if result_status == 409:
                assert answers["result"].get_json()["error"]["code"] == "task_cancelled"
        shown = get_job(app.test_client(), headers["user"], job["id"])
        assert shown["status"] == stored["status"]
        assert shown["partial_result"] is None
        endings = [
            r["event"]
            for r in db.execute(
                "SELECT event FROM outbox WHERE job_id = %s AND event IN "
                "('job.succeeded', 'job.cancelled', 'job.failed')",
                (job["id"],),
            )
        ]
        assert endings == [f"job.{stored['status']}"]


# --- retry ------------------------------------------------------------------------------------


def test_retrying_a_job_that_ran_out_of_read_retries_finishes_it_and_keeps_accepted_summaries(
    client, headers, db, worker
):
    job = submit(client, headers["user"], DATA, chunks=4)
    assert worker.run(worker.claim_one()).status_code == 200
    exhaust_read_retries(worker, worker.claim_one())
    failed = get_job(client, headers["user"], job["id"])
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == "attempts_exhausted"
    kept = db.execute("SELECT * FROM chunk_summaries").fetchall()
    assert [r["chunk_index"] for r in kept] == [0]

    response = retry(client, headers["user"], job["id"])

    assert response.status_code == 200
    retried = response.get_json()
    assert retried["status"] == "running"
    assert retried["revision"] > failed["revision"]
    assert (retried["error"], retried["partial_result"]) == (None, None)
    assert worker.drain() == 3
    done = get_job(client, headers["user"], job["id"])
    assert done["status"] == "succeeded"
    assert done["result"] == csvstats.sequential_totals(DATA, "value").to_dict()
    rows = db.execute("SELECT * FROM chunk_summaries ORDER BY chunk_index").fetchall()
    assert [r["chunk_index"] for r in rows] == [0, 1, 2, 3]
    assert rows[0] == kept[0]
    # The attempt number is the fencing generation, so the re-run never reuses one.
    assert rows[1]["attempt"] == 4


def test_retrying_a_job_that_lost_its_lease_twice_finishes_it(client, headers, rt, worker):
    job = submit(client, headers["user"], DATA, chunks=2)
    for _ in range(2):
        worker.claim_one()
        tasks.expire_leases(rt, now=later())
    assert get_job(client, headers["user"], job["id"])["status"] == "failed"

    assert retry(client, headers["user"], job["id"]).status_code == 200

    assert worker.drain() == 2
    assert get_job(client, headers["user"], job["id"])["status"] == "succeeded"


def test_a_job_that_failed_before_its_bad_record_was_decisive_is_retried_to_that_answer(
    client, headers, worker, other_worker
):
    data = generate_csv(400, seed=11, malformed_at=350)  # in the last of four chunks
    job = submit(client, headers["user"], data, chunks=4)
    leased = {t["chunk_index"]: t for t in worker.claim(capacity=2) + other_worker.claim(2)}
    assert other_worker.run(leased[3]).status_code == 200  # invalid_input, not decisive yet
    exhaust_read_retries(worker, leased[0])
    failed = get_job(client, headers["user"], job["id"])
    assert failed["error"]["code"] == "attempts_exhausted"

    response = retry(client, headers["user"], job["id"])

    assert response.status_code == 200, response.get_json()
    worker.drain()
    done = get_job(client, headers["user"], job["id"])
    assert (done["status"], done["error"]["code"]) == ("failed", "invalid_input")
    with pytest.raises(csvstats.BadRecord) as sequential:
        csvstats.sequential_totals(data, "value")
    details = done["error"]["details"]
    assert (details["record"], details["line"]) == (350, sequential.value.record.line)


UNRECOVERABLE = {
    "invalid_input": generate_csv(50, seed=3, malformed_at=30),
    "sum_overflow": b"id,value\n1,9223372036854775807\n2,1\n",
}


@pytest.mark.parametrize("code", UNRECOVERABLE)
def test_a_job_that_failed_on_its_input_is_not_recoverable(client, headers, db, worker, code):
    job = submit(client, headers["user"], UNRECOVERABLE[code], chunks=1)
    assert worker.run(worker.claim_one()).status_code == 200
    failed = get_job(client, headers["user"], job["id"])
    assert (failed["status"], failed["error"]["code"]) == ("failed", code)
    before = row_counts(db)

    response = retry(client, headers["user"], job["id"])

    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "not_recoverable"
    assert get_job(client, headers["user"], job["id"])["revision"] == failed["revision"]
    assert row_counts(db) == before
    assert worker.claim() == []


def test_only_a_failed_job_can_be_retried(client, headers, worker):
    job = submit(client, headers["user"], DATA, chunks=1)
    refusals = {}
    refusals["queued"] = retry(client, headers["user"], job["id"])
    task = worker.claim_one()
    refusals["running"] = retry(client, headers["user"], job["id"])
    worker.run(task)
    refusals["succeeded"] = retry(client, headers["user"], job["id"])
    other = submit(client, headers["user"], DATA[:200], chunks=1, column="id")
    cancel(client, headers["user"], other["id"])
    refusals["cancelled"] = retry(client, headers["user"], other["id"])

    for state, response in refusals.items():
        assert response.status_code == 409, state
        error = response.get_json()["error"]
        assert (error["code"], error["details"]["status"]) == ("not_failed", state)


# --- progress and audit -----------------------------------------------------------------------


def test_progress_never_decreases_through_a_lost_lease_and_a_retry_and_is_one_only_on_success(
    client, headers, rt, worker
):
    samples: list[tuple[str, float]] = []
    job = submit(client, headers["user"], DATA, chunks=3)

    def sample() -> None:
        shown = get_job(client, headers["user"], job["id"])
        samples.append((shown["status"], shown["progress"]))

    sample()
    first = worker.claim_one()
    sample()
    worker.run(first)
    sample()
    for _ in range(2):  # chunk 1 loses its lease twice: once retried, then failed
        worker.claim_one()
        sample()
        tasks.expire_leases(rt, now=later())
        sample()
    assert samples[-1][0] == "failed"
    retry(client, headers["user"], job["id"])
    sample()
    while claimed := worker.claim():
        sample()
        worker.run(claimed[0])
        sample()

    assert samples[-1] == ("succeeded", 1.0)
    progress = [p for _, p in samples]
    assert progress == sorted(progress), samples
    assert all(0.0 <= p <= 1.0 for p in progress)
    assert all((p == 1.0) == (status == "succeeded") for status, p in samples), samples


def test_cancel_and_retry_are_audited_with_the_actor_and_the_trace_id(
    client, headers, db, rt, worker
):
    job = submit(client, headers["user"], DATA, chunks=2)
    for _ in range(2):
        worker.claim_one()
        tasks.expire_leases(rt, now=later())
    retry_trace, retry_header = traceparent()
    cancel_trace, cancel_header = traceparent()

    retried = retry(client, headers["operator"], job["id"], **retry_header)
    cancelled = cancel(client, headers["user"], job["id"], **cancel_header)

    assert retried.status_code == cancelled.status_code == 200
    assert retried.headers["X-Trace-Id"] == retry_trace
    assert cancelled.headers["X-Trace-Id"] == cancel_trace
    audit = db.execute(
        "SELECT actor, action, target, trace_id FROM audit_log "
        "WHERE action IN ('job.retry', 'job.cancel') ORDER BY id"
    ).fetchall()
    assert audit == [
        {"actor": "operator", "action": "job.retry", "target": job["id"], "trace_id": retry_trace},
        {
            "actor": "compute_user",
            "action": "job.cancel",
            "target": job["id"],
            "trace_id": cancel_trace,
        },
    ]
    events = db.execute(
        "SELECT event, trace_id FROM outbox WHERE event IN "
        "('job.retried', 'job.cancelled') ORDER BY id"
    ).fetchall()
    assert events == [
        {"event": "job.retried", "trace_id": retry_trace},
        {"event": "job.cancelled", "trace_id": cancel_trace},
    ]
