"""CHUNKWISE_ARCHIVE_RETENTION_DAYS: archived inputs no job refers to are deleted once old."""

from __future__ import annotations

import hashlib
import os
import time

from services import archive_retention
from services.archive import archive_path
from tests.integration.csv_worker import settings, submit, upload

KEPT = b"id,value\n1,2\n3,4\n"
ORPHAN = b"id,value\n5,6\n7,8\n"
TWO_DAYS = 2 * 86_400


def stored(archive_dir, data: bytes):
    """Where the archive keeps these bytes."""
    return archive_path(archive_dir, hashlib.sha256(data).hexdigest())


def age(path, seconds: float) -> None:
    """Make a file look stored `seconds` ago."""
    then = time.time() - seconds
    os.utime(path, (then, then))


def delete_job(db, job_id: str) -> None:
    """Delete a job as history retention does, tasks and all."""
    db.execute("DELETE FROM jobs WHERE id = %s", (job_id,))


@settings(CHUNKWISE_ARCHIVE_RETENTION_DAYS="1")
def test_an_old_input_of_a_deleted_job_is_removed_and_a_referenced_one_kept(
    client, headers, db, rt, archive_dir
):
    submit(client, headers["user"], KEPT, chunks=1)
    delete_job(db, submit(client, headers["user"], ORPHAN, chunks=1)["id"])
    age(stored(archive_dir, KEPT), TWO_DAYS)
    age(stored(archive_dir, ORPHAN), TWO_DAYS)

    assert archive_retention.remove_unreferenced_inputs(rt) == 1

    assert stored(archive_dir, KEPT).exists()
    assert not stored(archive_dir, ORPHAN).exists()


@settings(CHUNKWISE_ARCHIVE_RETENTION_DAYS="3")
def test_an_unreferenced_input_younger_than_the_setting_is_kept(
    client, headers, db, rt, archive_dir
):
    delete_job(db, submit(client, headers["user"], ORPHAN, chunks=1)["id"])
    age(stored(archive_dir, ORPHAN), TWO_DAYS)

    assert archive_retention.remove_unreferenced_inputs(rt) == 0
    assert stored(archive_dir, ORPHAN).exists()


@settings(CHUNKWISE_ARCHIVE_RETENTION_DAYS="1")
def test_uploading_the_same_bytes_again_renews_the_input_so_the_sweep_leaves_it(
    client, headers, db, rt, archive_dir
):
    delete_job(db, submit(client, headers["user"], ORPHAN, chunks=1)["id"])
    age(stored(archive_dir, ORPHAN), TWO_DAYS)
    # Its job not yet committed when the sweep lists the archive: only the renewed time saves it.
    assert upload(client, headers["user"], ORPHAN, chunks=1, priority=1).status_code == 201
    delete_job(db, db.execute("SELECT id FROM jobs").fetchone()["id"])

    assert archive_retention.remove_unreferenced_inputs(rt) == 0
    assert stored(archive_dir, ORPHAN).exists()


@settings(CHUNKWISE_ARCHIVE_RETENTION_DAYS="1")
def test_a_process_sweeps_the_archive_at_most_once_an_hour(client, headers, db, rt, archive_dir):
    assert archive_retention.remove_unreferenced_inputs(rt) == 0
    delete_job(db, submit(client, headers["user"], ORPHAN, chunks=1)["id"])
    age(stored(archive_dir, ORPHAN), TWO_DAYS)

    assert archive_retention.remove_unreferenced_inputs(rt) == 0
    assert stored(archive_dir, ORPHAN).exists()


def test_without_the_setting_unreferenced_inputs_are_kept_forever(
    client, headers, db, rt, archive_dir
):
    delete_job(db, submit(client, headers["user"], ORPHAN, chunks=1)["id"])
    age(stored(archive_dir, ORPHAN), 1000 * 86_400)

    assert archive_retention.remove_unreferenced_inputs(rt) == 0
    assert stored(archive_dir, ORPHAN).exists()
