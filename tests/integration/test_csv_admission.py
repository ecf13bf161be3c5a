"""Admission of CSV jobs against the queued-chunk limit: all of a job, or none of it."""

from __future__ import annotations

import threading

import pytest

from devstack.sample_csv import generate_csv
from tests.integration.csv_worker import CsvWorker, files_under, row_counts, submit, upload

LIMIT = 10


@pytest.fixture
def app_config(app_config):
    """A queue that holds at most LIMIT unfinished chunks."""
    return {**app_config, "CHUNKWISE_MAX_QUEUED_CHUNKS": str(LIMIT)}


def unfinished_chunks(db) -> int:
    """Chunks that count against the limit: pending or leased."""
    return db.execute(
        "SELECT count(*) AS n FROM tasks WHERE status IN ('pending', 'leased')"
    ).fetchone()["n"]


def test_a_job_that_would_overfill_the_queue_is_429_with_retry_after_and_leaves_nothing(
    client, headers, db, archive_dir
):
    submit(client, headers["user"], generate_csv(40, seed=1), chunks=4)
    submit(client, headers["user"], generate_csv(40, seed=2), chunks=4)
    assert unfinished_chunks(db) == 8
    before, archived = row_counts(db), files_under(archive_dir)

    response = upload(client, headers["user"], generate_csv(40, seed=3), chunks=4)

    assert response.status_code == 429
    assert response.headers["Retry-After"].isdigit()
    error = response.get_json()["error"]
    assert error["code"] == "queue_full"
    assert error["details"] == {"queued_chunks": 8, "requested_chunks": 4, "limit": LIMIT}
    assert row_counts(db) == before
    assert files_under(archive_dir) == archived


def test_a_job_that_exactly_fills_the_queue_is_admitted(client, headers, db):
    submit(client, headers["user"], generate_csv(40, seed=1), chunks=8)

    response = upload(client, headers["user"], generate_csv(40, seed=2), chunks=2)

    assert response.status_code == 201, response.get_json()
    assert unfinished_chunks(db) == LIMIT


def test_finished_chunks_make_room_for_new_jobs(client, headers, db):
    submit(client, headers["user"], generate_csv(40, seed=1), chunks=8)
    assert upload(client, headers["user"], generate_csv(40, seed=2), chunks=4).status_code == 429

    CsvWorker(client, headers["worker"], "csv-a").drain()

    assert upload(client, headers["user"], generate_csv(40, seed=2), chunks=4).status_code == 201


def test_concurrent_submitters_never_overfill_the_queue_and_each_accepted_job_is_whole(
    app, headers, db, archive_dir
):
    submitters = 6
    barrier = threading.Barrier(submitters)
    statuses: list[int] = []
    lock = threading.Lock()

    def submit_once(seed: int) -> None:
        client = app.test_client()
        barrier.wait()
        response = upload(client, headers["user"], generate_csv(40, seed=seed), chunks=4)
        with lock:
            statuses.append(response.status_code)

    threads = [threading.Thread(target=submit_once, args=(n,)) for n in range(submitters)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    assert sorted(statuses) == [201, 201] + [429] * (submitters - 2)
    assert unfinished_chunks(db) <= LIMIT
    per_job = db.execute(
        "SELECT j.id, j.chunks_total, count(t.id) AS n FROM jobs j "
        "LEFT JOIN tasks t ON t.job_id = j.id GROUP BY j.id"
    ).fetchall()
    assert len(per_job) == 2
    assert all(row["n"] == row["chunks_total"] == 4 for row in per_job)
    assert row_counts(db)["outbox"] == 2
    assert len(files_under(archive_dir)) == 2
