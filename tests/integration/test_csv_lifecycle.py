"""A CSV job from claim to merge: chunk payloads, fenced results, failure classes, views, events."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest

from devstack.sample_csv import HEADER, generate_csv
from services import csvstats, tasks
from tests.integration.csv_worker import get_job, row_counts, submit

# Quoted multiline notes, blank values, negatives; 1001 records leave the last of 4 chunks short.
DATA = generate_csv(1001, seed=7)
MALFORMED_AT = 600  # in the third of four chunks (records 503-753)
MAX_ATTEMPTS = 5  # above every class budget, so the budgets are what stop a chunk


@pytest.fixture
def app_config(app_config):
    """max_attempts high enough that the per-class retry budgets decide."""
    return {**app_config, "CHUNKWISE_MAX_ATTEMPTS": str(MAX_ATTEMPTS)}


def later() -> datetime:
    """A moment after every lease granted now has run out."""
    return datetime.now(UTC) + timedelta(minutes=5)


def chunk_state(db, task_id: str) -> dict:
    """Everything a result could change about a chunk: its row, attempts and summaries."""
    return {
        "task": db.execute("SELECT * FROM tasks WHERE id = %s", (task_id,)).fetchone(),
        "attempts": db.execute(
            "SELECT * FROM task_attempts WHERE task_id = %s ORDER BY attempt", (task_id,)
        ).fetchall(),
        "summaries": db.execute("SELECT * FROM chunk_summaries ORDER BY chunk_index").fetchall(),
        "events": db.execute("SELECT * FROM outbox ORDER BY id").fetchall(),
    }


def attempt_outcomes(db, task_id: str) -> list[str | None]:
    """The outcome of each attempt at a chunk, oldest first."""
    rows = db.execute(
        "SELECT outcome FROM task_attempts WHERE task_id = %s ORDER BY attempt", (task_id,)
    ).fetchall()
    return [r["outcome"] for r in rows]


def test_the_sample_file_has_what_the_merge_must_get_right():
    assert b'"first line\n' in DATA or b'"first line\r\n' in DATA
    assert b",-" in DATA
    assert any(line.split(b",")[2:3] in ([b""], [b" "], [b"\t"]) for line in DATA.splitlines())


# --- the claim payload and the input ------------------------------------------------------------


def test_claimed_chunks_carry_their_plan_and_an_input_uri_serving_exactly_their_bytes(
    client, headers, worker, other_worker
):
    job = submit(client, headers["user"], DATA, chunks=4)
    claimed = worker.claim(capacity=2) + other_worker.claim(capacity=2)
    holders = [worker, worker, other_worker, other_worker]

    assert [t["chunk_index"] for t in claimed] == [0, 1, 2, 3]
    line = 2
    pieces = []
    for task, holder in zip(claimed, holders, strict=True):
        assert task["job_id"] == job["id"]
        assert task["workload"] == "csv_stats"
        assert task["input_uri"] == f"/api/v1/tasks/{task['task_id']}/input"
        start = task["chunk_index"] * 251
        assert task["parameters"] == {
            "column": "value",
            "column_index": 2,
            "delimiter": ",",
            "record_start": start,
            "record_end": min(start + 251, 1001),
            "first_line": line,
        }
        body = holder.read_bytes(task)
        assert hashlib.sha256(body).hexdigest() == task["input_sha256"]
        line += body.count(b"\n")  # the sample's only line breaks are LF and CRLF
        pieces.append(body)
    assert b"".join(pieces) == DATA[len(HEADER) :]


def test_reading_a_chunks_input_needs_the_current_attempt_of_its_lease_holder(
    client, headers, worker, other_worker
):
    submit(client, headers["user"], DATA)
    task = worker.claim_one()

    wrong_attempt = worker.read_input(task, attempt=task["attempt"] + 1)
    not_the_holder = other_worker.read_input(task)

    assert wrong_attempt.status_code == 409
    assert wrong_attempt.get_json()["error"]["code"] == "lease_lost"
    assert not_the_holder.status_code == 409
    assert not_the_holder.get_json()["error"]["code"] == "lease_lost"
    assert worker.read_input(task).status_code == 200


# --- merging ----------------------------------------------------------------------------------


@pytest.mark.parametrize("chunks", [1, 4, 64])
def test_the_merged_result_equals_one_sequential_pass_over_the_file(
    client, headers, worker, chunks
):
    job = submit(client, headers["user"], DATA, chunks=chunks)

    ran = worker.drain()

    done = get_job(client, headers["user"], job["id"])
    assert ran == job["chunks_total"]
    assert done["status"] == "succeeded"
    assert done["result"] == csvstats.sequential_totals(DATA, "value").to_dict()
    assert done["partial_result"] is None
    assert done["progress"] == 1.0


def test_each_chunk_keeps_exactly_one_accepted_summary_and_a_replayed_result_adds_nothing(
    client, headers, db, worker
):
    job = submit(client, headers["user"], DATA, chunks=4)
    for _ in range(3):
        assert worker.run(worker.claim_one()).status_code == 200
    last = worker.claim_one()
    summary = worker.summarise(last).to_dict()
    assert worker.report_result(last, summary).status_code == 200
    assert get_job(client, headers["user"], job["id"])["status"] == "succeeded"
    before = row_counts(db)

    replay = worker.report_result(last, summary)

    assert replay.status_code == 200
    assert replay.get_json()["status"] == "completed"
    assert row_counts(db) == before
    rows = db.execute(
        "SELECT chunk_index, attempt FROM chunk_summaries WHERE job_id = %s ORDER BY chunk_index",
        (job["id"],),
    ).fetchall()
    assert rows == [{"chunk_index": i, "attempt": 1} for i in range(4)]


def test_a_different_result_for_an_accepted_attempt_is_a_conflict(client, headers, db, worker):
    submit(client, headers["user"], DATA, chunks=4)
    task = worker.claim_one()
    summary = worker.summarise(task).to_dict()
    assert worker.report_result(task, summary).status_code == 200
    before = chunk_state(db, task["task_id"])

    changed = worker.report_result(
        task, {**summary, "sum": summary["sum"] + 1, "max_prefix": summary["max_prefix"] + 10**9}
    )

    assert changed.status_code == 409
    assert changed.get_json()["error"]["code"] == "result_conflict"
    assert chunk_state(db, task["task_id"]) == before


def test_a_summary_with_a_wrong_digest_is_422_and_not_accepted(client, headers, db, worker):
    submit(client, headers["user"], DATA, chunks=4)
    task = worker.claim_one()
    summary = worker.summarise(task).to_dict()
    before = chunk_state(db, task["task_id"])

    response = worker.report_result(task, {**summary, "digest": "0" * 64})

    assert response.status_code == 422
    assert response.get_json()["error"]["code"] == "digest_mismatch"
    assert chunk_state(db, task["task_id"]) == before
    assert worker.report_result(task, summary).status_code == 200  # the lease is still held


def test_a_summary_with_a_wrong_record_count_is_422_and_not_accepted(client, headers, db, worker):
    submit(client, headers["user"], DATA, chunks=4)
    task = worker.claim_one()
    summary = worker.summarise(task).to_dict()
    before = chunk_state(db, task["task_id"])

    response = worker.report_result(task, {**summary, "records": summary["records"] + 1})

    assert response.status_code == 422
    assert "summary.records" in response.get_json()["error"]["details"]["fields"]
    assert chunk_state(db, task["task_id"]) == before


def test_a_summary_whose_sum_no_column_could_have_is_422_and_the_job_still_merges(
    client, headers, db, worker
):
    job = submit(client, headers["user"], DATA, chunks=1)
    task = worker.claim_one()
    summary = worker.summarise(task).to_dict()
    huge = summary["count"] * summary["max"] + 10**4000

    response = worker.report_result(task, {**summary, "sum": huge, "max_prefix": huge})

    assert response.status_code == 422
    assert "summary" in response.get_json()["error"]["details"]["fields"]
    assert worker.report_result(task, summary).status_code == 200
    assert get_job(client, headers["user"], job["id"])["status"] == "succeeded"


# --- fencing ----------------------------------------------------------------------------------


def test_a_result_from_an_attempt_whose_lease_expired_and_was_reclaimed_is_409_stale(
    client, headers, db, rt, worker, other_worker
):
    submit(client, headers["user"], DATA, chunks=4)
    stale = worker.claim_one()
    summary = worker.summarise(stale).to_dict()
    tasks.expire_leases(rt, now=later())
    current = other_worker.claim_one()
    assert (current["task_id"], current["attempt"]) == (stale["task_id"], 2)
    before = chunk_state(db, stale["task_id"])

    response = worker.report_result(stale, summary)

    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "stale_attempt"
    assert chunk_state(db, stale["task_id"]) == before
    assert other_worker.report_result(current, summary).status_code == 200


def test_a_result_from_another_worker_under_the_current_attempt_is_409_lease_lost(
    client, headers, db, worker, other_worker
):
    submit(client, headers["user"], DATA, chunks=4)
    task = worker.claim_one()
    summary = worker.summarise(task).to_dict()
    before = chunk_state(db, task["task_id"])

    response = other_worker.report_result(task, summary)

    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "lease_lost"
    assert chunk_state(db, task["task_id"]) == before


# --- failure classes --------------------------------------------------------------------------


def test_invalid_input_is_never_retried_and_fails_the_job_naming_the_record_and_line(
    client, headers, db, worker, other_worker
):
    data = generate_csv(1001, seed=7, malformed_at=MALFORMED_AT)
    with pytest.raises(csvstats.BadRecord) as sequential:
        csvstats.sequential_totals(data, "value")
    job = submit(client, headers["user"], data, chunks=4)
    first_two = worker.claim(capacity=2)
    bad = other_worker.claim_one()
    assert bad["chunk_index"] == 2

    # The bad chunk reports first; the job must wait for the chunks before it.
    assert other_worker.run(bad).status_code == 200
    assert get_job(client, headers["user"], job["id"])["status"] == "running"
    for task in first_two:
        assert worker.run(task).status_code == 200

    failed = get_job(client, headers["user"], job["id"])
    assert failed["status"] == "failed"
    error = failed["error"]
    assert error["code"] == "invalid_input"
    assert (
        (error["details"]["record"], error["details"]["line"])
        == (sequential.value.record.record, sequential.value.record.line)
        == (MALFORMED_AT, sequential.value.record.line)
    )
    assert f"record {MALFORMED_AT} (line {sequential.value.record.line})" in error["message"]
    assert attempt_outcomes(db, bad["task_id"]) == ["failed"]
    assert worker.claim() == []


def test_unreadable_input_is_retried_twice_then_fails_the_job_as_attempts_exhausted(
    client, headers, db, worker
):
    job = submit(client, headers["user"], DATA, chunks=4)
    task = worker.claim_one()
    for attempt in (1, 2, 3):
        assert (task["chunk_index"], task["attempt"]) == (0, attempt)
        assert worker.report_unreadable(task).status_code == 200
        if attempt < 3:
            task = worker.claim_one()

    failed = get_job(client, headers["user"], job["id"])
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == "attempts_exhausted"
    assert failed["error"]["details"]["error_code"] == "input_unavailable"
    assert attempt_outcomes(db, task["task_id"]) == ["retried", "retried", "failed"]
    assert db.execute(
        "SELECT attempt < max_attempts AS budget_stopped FROM tasks WHERE id = %s",
        (task["task_id"],),
    ).fetchone()["budget_stopped"]
    assert worker.claim() == []


def test_a_lost_lease_is_retried_once_then_fails_the_job(client, headers, db, rt, worker):
    job = submit(client, headers["user"], DATA, chunks=4)
    first = worker.claim_one()
    tasks.expire_leases(rt, now=later())
    second = worker.claim_one()
    assert (second["task_id"], second["attempt"]) == (first["task_id"], 2)
    tasks.expire_leases(rt, now=later())

    failed = get_job(client, headers["user"], job["id"])
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == "attempts_exhausted"
    assert failed["error"]["details"]["error_code"] == "lease_expired"
    assert attempt_outcomes(db, first["task_id"]) == ["lease_expired", "lease_expired"]
    assert worker.claim() == []


def test_a_failed_job_shows_its_completed_chunks_as_a_partial_result_and_no_result(
    client, headers, db, worker
):
    job = submit(client, headers["user"], DATA, chunks=4)
    completed = b""
    for _ in range(3):
        task = worker.claim_one()
        completed += worker.read_bytes(task)
        assert worker.run(task).status_code == 200
    last = worker.claim_one()
    while worker.report_unreadable(last).get_json()["status"] == "pending":
        last = worker.claim_one()

    failed = get_job(client, headers["user"], job["id"])
    assert failed["status"] == "failed"
    assert failed["result"] is None
    expected = csvstats.sequential_totals(HEADER.encode() + completed, "value").to_dict()
    assert failed["partial_result"] == {**expected, "chunks": [0, 1, 2], "partial": True}
    assert (
        db.execute("SELECT result FROM jobs WHERE id = %s", (job["id"],)).fetchone()["result"]
        is None
    )


# Three chunks of two records each; the first error of a sequential pass decides the outcome.
NEAR_MAX = 9223372036854775800  # int64 max is ...807
FIRST_ERRORS = {
    "overflow-in-an-earlier-chunk": (
        [f"{NEAR_MAX}", "7", "1", "-5", "2", "not-a-number"],
        "sum_overflow",
        1,
    ),
    "overflow-before-the-bad-record-in-its-chunk": (
        ["1", "2", f"{NEAR_MAX}", "1", "9", "not-a-number"],
        "sum_overflow",
        2,
    ),
    "bad-record-before-a-later-overflow": (
        [f"{NEAR_MAX}", "1", "not-a-number", "3", "9", "9"],
        "invalid_input",
        1,
    ),
}


@pytest.mark.parametrize(
    "bad_chunk_reports_first",
    [True, False],
    ids=["bad-chunk-reports-first", "bad-chunk-reports-last"],
)
@pytest.mark.parametrize(
    "values, code, chunk_index", FIRST_ERRORS.values(), ids=FIRST_ERRORS.keys()
)
def test_the_job_fails_with_the_first_error_a_sequential_pass_would_meet(
    client, headers, worker, other_worker, values, code, chunk_index, bad_chunk_reports_first
):
    data = b"id,value\n" + b"".join(f"{n},{v}\n".encode() for n, v in enumerate(values, 1))
    sequential = {"sum_overflow": csvstats.SumOverflow, "invalid_input": csvstats.BadRecord}
    with pytest.raises(sequential[code]):
        csvstats.sequential_totals(data, "value")
    job = submit(client, headers["user"], data, chunks=3)
    claimed = worker.claim(capacity=2) + other_worker.claim(capacity=2)
    assert [t["chunk_index"] for t in claimed] == [0, 1, 2]
    holders = [worker, worker, other_worker]
    summaries = [holder.summarise(task) for holder, task in zip(holders, claimed, strict=True)]
    bad_first = sorted(range(3), key=lambda i: summaries[i].error is None)
    order = bad_first if bad_chunk_reports_first else bad_first[::-1]

    for i in order:
        if get_job(client, headers["user"], job["id"])["status"] != "running":
            break  # a failure before the bad chunk may end the job early; never here
        report = (
            holders[i].report_invalid_input(claimed[i], summaries[i])
            if summaries[i].error
            else holders[i].report_result(claimed[i], summaries[i].to_dict())
        )
        assert report.status_code == 200, report.get_json()

    failed = get_job(client, headers["user"], job["id"])
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == code
    assert failed["error"]["details"]["chunk_index"] == chunk_index


# --- views and events -------------------------------------------------------------------------


def test_chunk_views_show_each_chunk_with_its_attempts_summary_and_error(
    client, headers, db, rt, worker, other_worker
):
    job = submit(client, headers["user"], DATA, chunks=4)
    assert worker.run(worker.claim_one()).status_code == 200
    lost = worker.claim_one()
    tasks.expire_leases(rt, now=later())
    assert other_worker.run(other_worker.claim_one()).status_code == 200
    assert worker.drain() == 2

    response = client.get(f"/api/v1/jobs/{job['id']}/chunks", headers=headers["user"])

    assert response.status_code == 200
    chunks = response.get_json()["chunks"]
    accepted = {
        r["task_id"]: r["summary"]
        for r in db.execute("SELECT task_id::text, summary FROM chunk_summaries").fetchall()
    }
    assert [c["index"] for c in chunks] == [0, 1, 2, 3]
    for c in chunks:
        assert {
            "id",
            "index",
            "record_start",
            "record_end",
            "state",
            "attempt",
            "attempts",
            "summary",
            "error",
        } <= c.keys()
        assert (c["record_start"], c["record_end"]) == (
            c["index"] * 251,
            min(c["index"] * 251 + 251, 1001),
        )
        assert c["state"] == "completed"
        assert c["summary"] == accepted[c["id"]]
        assert c["error"] is None
        for a in c["attempts"]:
            assert {
                "attempt_id",
                "attempt",
                "worker_id",
                "state",
                "started_at",
                "finished_at",
                "error",
                "trace_id",
            } <= a.keys()
    retried = chunks[1]
    assert retried["id"] == lost["task_id"]
    assert retried["attempt"] == 2
    first, second = retried["attempts"]
    assert (first["attempt"], first["worker_id"], first["state"]) == (1, "csv-a", "lease_expired")
    assert first["error"]["code"] == "lease_expired"
    assert (second["attempt"], second["worker_id"], second["state"]) == (2, "csv-b", "completed")
    assert first["attempt_id"] != second["attempt_id"]
    assert first["trace_id"] != second["trace_id"]
    assert first["finished_at"] and second["finished_at"]

    one = client.get(f"/api/v1/jobs/{job['id']}/chunks/{lost['task_id']}", headers=headers["user"])
    assert one.status_code == 200
    # The chunk's own view is its list entry plus what a list leaves out.
    shown = one.get_json()
    assert {k: v for k, v in shown.items() if k not in ("trace_id", "metrics", "checkpoint")} == (
        retried
    )
    assert shown["metrics"] == {"records": 251}


def test_a_failed_chunk_shows_its_error_in_the_chunk_view(client, headers, worker):
    job = submit(client, headers["user"], DATA, chunks=2)
    task = worker.claim_one()
    while worker.report_unreadable(task).get_json()["status"] == "pending":
        task = worker.claim_one()

    view = client.get(
        f"/api/v1/jobs/{job['id']}/chunks/{task['task_id']}", headers=headers["user"]
    ).get_json()

    assert view["state"] == "failed"
    assert view["error"]["code"] == "input_unavailable"
    assert view["summary"] is None
    assert [a["state"] for a in view["attempts"]] == ["retried", "retried", "failed"]


def test_the_event_feed_shows_the_job_created_each_chunk_completed_then_the_job_succeeded(
    client, headers, worker
):
    job = submit(client, headers["user"], DATA, chunks=4)
    worker.drain()

    feed = client.get("/api/v1/events", query_string={"after": 0}, headers=headers["user"])

    events = feed.get_json()["events"]
    assert [e["event"] for e in events] == ["job.created"] + ["chunk.completed"] * 4 + [
        "job.succeeded"
    ]
    assert {e["job_id"] for e in events} == {job["id"]}
    assert [e["payload"]["chunk_index"] for e in events[1:5]] == [0, 1, 2, 3]
    assert events[-1]["payload"]["result"] == get_job(client, headers["user"], job["id"])["result"]
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
    assert (
        client.get(
            "/api/v1/events", query_string={"after": 0}, headers=headers["other"]
        ).get_json()["events"]
        == []
    )


def test_another_users_job_is_404_on_every_route_while_owner_and_operator_see_it(
    client, headers, db, worker
):
    job = submit(client, headers["user"], DATA, chunks=2)
    chunk = worker.claim_one()
    base = f"/api/v1/jobs/{job['id']}"
    reads = [base, f"{base}/chunks", f"{base}/chunks/{chunk['task_id']}", f"{base}/results"]
    writes = [f"{base}/cancel", f"{base}/retry"]
    before = row_counts(db)

    for path in reads:
        response = client.get(path, headers=headers["other"])
        assert response.status_code == 404, path
        assert response.get_json()["error"]["code"] == "not_found"
    for path in writes:
        response = client.post(path, headers=headers["other"])
        assert response.status_code == 404, path
    assert row_counts(db) == before
    assert get_job(client, headers["user"], job["id"])["status"] == "running"
    listed = client.get("/api/v1/jobs", headers=headers["other"]).get_json()["jobs"]
    assert listed == []

    for who in ("user", "operator"):
        for path in reads:
            assert client.get(path, headers=headers[who]).status_code == 200, (who, path)
        retry = client.post(f"{base}/retry", headers=headers[who])
        assert retry.status_code == 409, who  # visible: refused for its state, not hidden
        assert retry.get_json()["error"]["code"] == "not_failed"
