"""Reading a chunk's input from the local archive: Range requests, and a coordinator without
the file answering 503 before any byte instead of spending the attempt."""

from __future__ import annotations

import hashlib

import pytest

from services.archive import archive_path
from tests.integration.csv_worker import CsvWorker, submit

DATA = b"id,value\n" + b"".join(b"%d,%d\n" % (i, i * 7) for i in range(2_000))


def read(worker: CsvWorker, task: dict, byte_range: str | None = None):
    """GET the chunk's input under the worker's lease, with a Range header when given."""
    return worker.client.get(
        task["input_uri"],
        headers={
            **worker.headers,
            "Chunkwise-Lease-Token": task["lease_token"],
            **({"Range": byte_range} if byte_range else {}),
        },
        query_string={"worker_id": worker.worker_id, "attempt": task["attempt"]},
    )


@pytest.fixture
def leased(client, headers, worker) -> tuple[dict, bytes]:
    """A leased chunk of a two-chunk job, and its whole input."""
    submit(client, headers["user"], DATA, chunks=2)
    task = worker.claim_one()
    return task, worker.read_bytes(task)


def test_a_read_without_a_range_answers_200_and_says_ranges_are_served(worker, leased):
    task, whole = leased

    answer = read(worker, task)

    assert (answer.status_code, answer.headers["Accept-Ranges"]) == (200, "bytes")
    assert "Content-Range" not in answer.headers
    assert answer.get_data() == whole


def test_a_range_from_byte_n_resumes_the_read_with_206_and_content_range(worker, leased):
    task, whole = leased

    answer = read(worker, task, "bytes=1000-")

    assert answer.status_code == 206
    assert answer.headers["Content-Range"] == f"bytes 1000-{len(whole) - 1}/{len(whole)}"
    assert answer.headers["Content-Length"] == str(len(whole) - 1000)
    assert answer.get_data() == whole[1000:]


def test_a_range_with_a_last_byte_serves_that_slice_and_no_more_than_the_chunk(worker, leased):
    task, whole = leased

    inside = read(worker, task, "bytes=10-19")
    past_the_end = read(worker, task, f"bytes=10-{len(whole) + 500}")

    assert (inside.status_code, inside.get_data()) == (206, whole[10:20])
    assert past_the_end.get_data() == whole[10:]
    assert past_the_end.headers["Content-Range"] == f"bytes 10-{len(whole) - 1}/{len(whole)}"


def test_a_range_starting_past_the_end_answers_416_with_the_length(worker, leased):
    task, whole = leased

    answer = read(worker, task, f"bytes={len(whole)}-")

    assert answer.status_code == 416
    assert answer.headers["Content-Range"] == f"bytes */{len(whole)}"
    assert answer.get_json()["error"]["code"] == "range_not_satisfiable"


@pytest.mark.parametrize(
    "byte_range", ["bytes=-100", "bytes=0-10,20-30", "items=0-", "bytes=20-10", "bytes=x-"]
)
def test_a_range_the_coordinator_does_not_serve_is_refused_naming_the_header(
    worker, leased, byte_range, db
):
    task, _ = leased

    answer = read(worker, task, byte_range)

    assert answer.status_code == 422
    assert list(answer.get_json()["error"]["details"]["fields"]) == ["Range"]
    row = db.execute("SELECT status, attempt FROM tasks WHERE id = %s", (task["task_id"],))
    assert row.fetchone() == {"status": "leased", "attempt": 1}


def test_a_coordinator_without_the_archived_file_answers_503_and_spends_no_attempt(
    client, headers, worker, archive_dir, db
):
    submit(client, headers["user"], DATA, chunks=2)
    task = worker.claim_one()
    archive_path(archive_dir, hashlib.sha256(DATA).hexdigest()).unlink()

    answer = read(worker, task)

    assert answer.status_code == 503
    assert answer.headers["Retry-After"]
    assert answer.get_json()["error"]["code"] == "input_not_here"
    assert answer.get_json()["error"]["details"] == {"setting": "CHUNKWISE_ARCHIVE_DIR"}
    closed = db.execute(
        "SELECT count(*) AS n FROM task_attempts WHERE task_id = %s AND outcome IS NOT NULL",
        (task["task_id"],),
    ).fetchone()["n"]
    row = db.execute("SELECT status, attempt FROM tasks WHERE id = %s", (task["task_id"],))
    assert (row.fetchone(), closed) == ({"status": "leased", "attempt": 1}, 0)
