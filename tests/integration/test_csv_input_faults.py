"""An archived input that breaks while a worker reads it fails that attempt at once.

Once the first block is out, so are the headers: the worker can only see the stream cut, as a
network blip looks, and would retry until its lease ran out. The coordinator fails the attempt
as input_unavailable first, so the worker's next read is refused and the chunk goes back to the
queue within that class's retry budget.
"""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest

from services import tasks
from services.archive import archive_path
from tests.integration.csv_worker import CsvWorker, submit

# Large enough that a chunk outlasts the file object's read-ahead buffer.
DATA = b"id,value\n" + b"".join(b"%d,%d\n" % (i, i * 7) for i in range(40_000))


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Serve inputs 64 bytes at a time, so the stream is under way after its first block."""
    monkeypatch.setattr(tasks, "READ_BLOCK", 64)


class ReadsThatFail:
    """A file whose reads fail with EIO after the first, as a failing disk's do."""

    def __init__(self, f):
        self._f, self._reads = f, 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()

    def close(self) -> None:
        self._f.close()

    def seek(self, offset: int) -> int:
        return self._f.seek(offset)

    def read(self, size: int) -> bytes:
        self._reads += 1
        if self._reads > 1:
            raise OSError(errno.EIO, "Input/output error")
        return self._f.read(size)


def start_reading(worker: CsvWorker, task: dict):
    """The input's blocks as the worker receives them, the first one already taken."""
    response = worker.read_input(task, buffered=False)
    assert response.status_code == 200
    blocks = iter(response.response)
    assert next(blocks)
    return blocks


def chunk(db, task_id: str) -> dict:
    """The task's status and error, and its attempts' outcomes."""
    row = db.execute(
        "SELECT status, lease_owner, error_code, error_details FROM tasks WHERE id = %s",
        (task_id,),
    ).fetchone()
    outcomes = db.execute(
        "SELECT outcome FROM task_attempts WHERE task_id = %s ORDER BY attempt", (task_id,)
    ).fetchall()
    return {**row, "outcomes": [o["outcome"] for o in outcomes]}


def test_a_read_error_mid_stream_fails_the_attempt_as_input_unavailable(
    client, headers, db, worker, monkeypatch
):
    submit(client, headers["user"], DATA, chunks=2)
    task = worker.claim_one()
    real_open = Path.open
    monkeypatch.setattr(Path, "open", lambda path, *a, **k: ReadsThatFail(real_open(path, *a, **k)))
    blocks = start_reading(worker, task)

    with pytest.raises(OSError):
        list(blocks)

    failed = chunk(db, task["task_id"])
    assert (failed["status"], failed["error_code"]) == ("pending", "input_unavailable")
    assert failed["error_details"] == {
        "directory": "archive",
        "setting": "CHUNKWISE_ARCHIVE_DIR",
        "reason": "EIO",
    }
    assert failed["outcomes"] == ["retried"]
    assert worker.read_input(task).status_code == 409


def test_an_archive_cut_short_under_a_stream_fails_the_attempt_the_same_way(
    client, headers, db, worker, archive_dir
):
    submit(client, headers["user"], DATA, chunks=2)
    task = worker.claim_one()
    blocks = start_reading(worker, task)
    os.truncate(archive_path(archive_dir, hashlib.sha256(DATA).hexdigest()), 100)

    with pytest.raises(EOFError):
        list(blocks)

    failed = chunk(db, task["task_id"])
    assert (failed["status"], failed["error_code"]) == ("pending", "input_unavailable")
    assert failed["error_details"]["reason"] == "truncated"
    assert worker.read_input(task).status_code == 409


def test_a_stream_that_breaks_after_its_lease_moved_on_leaves_the_new_attempt_alone(
    client, headers, db, worker, other_worker, monkeypatch
):
    submit(client, headers["user"], DATA, chunks=1)
    task = worker.claim_one()
    real_open = Path.open
    monkeypatch.setattr(Path, "open", lambda path, *a, **k: ReadsThatFail(real_open(path, *a, **k)))
    blocks = start_reading(worker, task)
    db.execute("UPDATE tasks SET lease_expires_at = now() - interval '1 second'")
    tasks.expire_leases(client.application.extensions["chunkwise.runtime"])
    again = other_worker.claim_one()

    with pytest.raises(OSError):
        list(blocks)

    leased = chunk(db, task["task_id"])
    assert (leased["status"], leased["lease_owner"]) == ("leased", "csv-b")
    assert leased["outcomes"] == ["lease_expired", None]
    assert again["attempt"] == 2
