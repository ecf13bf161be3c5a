"""A temp or archive directory that cannot take the upload answers 507 or 500 naming its role.

Faults: a full disk is injected (ENOSPC/EDQUOT raised by the spool's file or by the move into
the archive), because filling a real disk is neither portable nor quick; a misconfigured
directory is real (a regular file where the temp or archive directory should be, or where a
parent should be); EACCES and EROFS are injected at the move, since root ignores permissions.
Each case also proves nothing was half written. Start-up and /readyz check the same things.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from app import create_app, uploads
from app.config import ConfigError
from app.runtime import close
from devstack.sample_csv import generate_csv
from services import archive
from tests.integration.csv_worker import files_under, row_counts, settings, upload, upload_body

DATA = generate_csv(200, seed=3)


class FullDiskFile:
    """A spool file on a disk that fills up after `room` bytes."""

    def __init__(self, path: Path, code: int, room: int):
        self._file = open(path, "wb")  # noqa: SIM115 - closed by close(), like the real one
        self._path = path
        self._code = code
        self._room = room

    def write(self, data) -> int:
        if len(data) > self._room:
            raise OSError(self._code, os.strerror(self._code), str(self._path))
        self._room -= len(data)
        return self._file.write(data)

    def close(self) -> None:
        self._file.close()


@pytest.fixture
def full_temp_disk(monkeypatch):
    """Make spool files meet a full disk after 1 KiB; returns a setter for the errno."""
    state = {"code": errno.ENOSPC}

    def open_spool(path, mode="r", *args, **kwargs):
        if Path(path).name.startswith("upload-") and "x" in mode:
            return FullDiskFile(Path(path), state["code"], room=1024)
        return open(path, mode, *args, **kwargs)

    # The spool is opened with the builtin open() (its opener sets the file's mode).
    monkeypatch.setattr(uploads, "open", open_spool, raising=False)
    return state


def fail_moves_into(monkeypatch, directory: Path, code: int) -> None:
    """Make os.replace into `directory` fail with `code`, as the kernel would."""
    real_replace = os.replace

    def replace(src, dst, *args, **kwargs):
        if Path(dst).is_relative_to(directory):
            raise OSError(code, os.strerror(code), str(src), None, str(dst))
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(archive.os, "replace", replace)


def assert_error_names_role_not_path(body: dict, code: str, role: str, *paths: Path) -> None:
    """The documented error shape, naming the directory's role and setting, never a path."""
    assert set(body) == {"error", "trace_id"} and body["trace_id"]
    error = body["error"]
    assert set(error) == {"code", "message", "details"}
    assert error["code"] == code
    assert error["details"]["directory"] == role
    assert error["details"]["setting"] == archive.SETTING_OF_ROLE[role]
    assert role in error["message"]
    text = str(body)
    for path in paths:
        assert str(path) not in text
    assert "/tmp" not in text and "pytest" not in text


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT], ids=["ENOSPC", "EDQUOT"])
def test_a_full_temp_disk_while_spooling_is_507_naming_the_temp_directory(
    client, headers, db, full_temp_disk, temp_dir, archive_dir, code
):
    full_temp_disk["code"] = code
    before = row_counts(db)

    response = upload(client, headers["user"], DATA)

    assert response.status_code == 507
    assert "Retry-After" not in response.headers
    body = response.get_json()
    assert_error_names_role_not_path(body, "insufficient_storage", "temp", temp_dir)
    assert body["error"]["details"]["reason"] == errno.errorcode[code]
    assert row_counts(db) == before
    assert files_under(temp_dir) == [] and files_under(archive_dir) == []


def test_a_full_archive_disk_is_507_naming_the_archive_and_leaves_nothing_behind(
    client, headers, db, monkeypatch, temp_dir, archive_dir
):
    fail_moves_into(monkeypatch, archive_dir, errno.ENOSPC)
    before = row_counts(db)

    response = upload(client, headers["user"], DATA)

    assert response.status_code == 507
    assert_error_names_role_not_path(
        response.get_json(), "insufficient_storage", "archive", archive_dir, temp_dir
    )
    assert row_counts(db) == before
    assert files_under(temp_dir) == [] and files_under(archive_dir) == []


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS])
def test_an_archive_move_that_is_refused_is_500_storage_unavailable(
    client, headers, db, monkeypatch, temp_dir, archive_dir, code
):
    fail_moves_into(monkeypatch, archive_dir, code)
    before = row_counts(db)

    response = upload(client, headers["user"], DATA)

    assert response.status_code == 500
    body = response.get_json()
    assert_error_names_role_not_path(body, "storage_unavailable", "archive", archive_dir)
    assert body["error"]["details"]["reason"] == errno.errorcode[code]
    assert row_counts(db) == before
    assert files_under(temp_dir) == [] and files_under(archive_dir) == []


def test_an_archive_directory_replaced_by_a_file_is_500_storage_unavailable(
    client, headers, db, temp_dir, archive_dir
):
    shutil.rmtree(archive_dir)
    archive_dir.write_bytes(b"not a directory")
    before = row_counts(db)

    response = upload(client, headers["user"], DATA)

    assert response.status_code == 500
    body = response.get_json()
    assert_error_names_role_not_path(body, "storage_unavailable", "archive", archive_dir)
    assert body["error"]["details"]["reason"] == "ENOTDIR"
    assert row_counts(db) == before
    assert files_under(temp_dir) == []
    assert archive_dir.read_bytes() == b"not a directory"


def fail_spool_syncs(monkeypatch, code: int) -> None:
    """Make the sync of a finished spool fail with `code`, as fsync reports a failed write."""

    def sync(path: Path) -> None:
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(uploads, "sync_to_disk", sync)


@pytest.mark.parametrize(
    ("code", "status", "error"),
    [(errno.EIO, 500, "storage_unavailable"), (errno.ENOSPC, 507, "insufficient_storage")],
    ids=["EIO", "ENOSPC"],
)
@pytest.mark.parametrize("send", [upload, upload_body], ids=["multipart", "text/csv"])
def test_a_spool_whose_sync_fails_beside_the_split_admits_nothing(
    client, headers, db, monkeypatch, temp_dir, archive_dir, code, status, error, send
):
    fail_spool_syncs(monkeypatch, code)
    before = row_counts(db)

    response = send(client, headers["user"], DATA)

    assert response.status_code == status
    body = response.get_json()
    assert_error_names_role_not_path(body, error, "temp", temp_dir)
    assert body["error"]["details"]["reason"] == errno.errorcode[code]
    assert row_counts(db) == before
    assert files_under(temp_dir) == [] and files_under(archive_dir) == []


def test_a_failed_spool_sync_answers_before_what_the_split_found(
    client, headers, db, monkeypatch, temp_dir
):
    fail_spool_syncs(monkeypatch, errno.EIO)

    response = upload(client, headers["user"], DATA, column="no such column")

    assert response.status_code == 500
    assert response.get_json()["error"]["code"] == "storage_unavailable"


def test_a_temp_directory_replaced_by_a_file_is_500_storage_unavailable(
    client, headers, db, temp_dir, archive_dir
):
    shutil.rmtree(temp_dir)
    temp_dir.write_bytes(b"not a directory")
    before = row_counts(db)

    response = upload(client, headers["user"], DATA)

    assert response.status_code == 500
    body = response.get_json()
    assert_error_names_role_not_path(body, "storage_unavailable", "temp", temp_dir)
    assert body["error"]["details"]["reason"] == "EEXIST"  # mkdir: a file holds the name
    assert row_counts(db) == before
    assert files_under(archive_dir) == []
    assert temp_dir.read_bytes() == b"not a directory"


def test_a_storage_failure_is_logged_with_its_path_for_the_operator(
    client, headers, monkeypatch, archive_dir, caplog
):
    fail_moves_into(monkeypatch, archive_dir, errno.EACCES)

    with caplog.at_level("ERROR", logger="app.errors"):
        response = upload(client, headers["user"], DATA)

    assert response.status_code == 500
    [line] = [r for r in caplog.records if getattr(r, "event", None) == "storage_error"]
    assert (line.directory, line.reason) == ("archive", "EACCES")
    assert str(archive_dir) in line.error


@pytest.fixture
def spool_on_another_filesystem(app_config, tmp_path):
    """An app whose temp directory is on a filesystem other than its archive's."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second filesystem at /dev/shm")
    temp = shm / f"chunkwise-test-{tmp_path.name}"
    flask_app = create_app({**app_config, "CHUNKWISE_TEMP_DIR": str(temp)})
    yield flask_app
    close(flask_app.extensions["chunkwise.runtime"])
    shutil.rmtree(temp, ignore_errors=True)


def test_uploads_are_copied_into_an_archive_on_another_filesystem(
    spool_on_another_filesystem, headers, archive_dir
):
    assert spool_on_another_filesystem.test_client().get("/readyz").status_code == 200

    response = upload(spool_on_another_filesystem.test_client(), headers["user"], DATA)

    assert response.status_code == 201, response.get_json()
    assert [p.read_bytes() for p in files_under(archive_dir)] == [DATA]


def test_the_copy_across_filesystems_is_made_before_admission_holds_the_queue(
    spool_on_another_filesystem, headers, archive_dir, monkeypatch
):
    stored_from = []
    store = archive.store

    def store_recording_where_from(directory, staged):
        # Inside admission's transaction: by now the bytes must be a rename away.
        stored_from.append(os.stat(staged.path).st_dev == os.stat(directory).st_dev)
        return store(directory, staged)

    monkeypatch.setattr(archive, "store", store_recording_where_from)

    response = upload(spool_on_another_filesystem.test_client(), headers["user"], DATA)

    assert response.status_code == 201, response.get_json()
    assert stored_from == [True]
    assert [p.read_bytes() for p in files_under(archive_dir)] == [DATA]


@settings(CHUNKWISE_MAX_QUEUED_CHUNKS="4")
def test_a_staged_copy_of_a_refused_upload_is_removed(
    spool_on_another_filesystem, headers, archive_dir
):
    browser = spool_on_another_filesystem.test_client()
    assert upload(browser, headers["user"], DATA).status_code == 201

    refused = upload(browser, headers["user"], DATA + b"1,2\n")

    assert refused.status_code == 429, refused.get_json()
    assert [p.read_bytes() for p in files_under(archive_dir)] == [DATA]


# --- start-up and /readyz ---------------------------------------------------------------


def test_readyz_is_503_naming_the_setting_of_a_directory_that_went_away(
    client, archive_dir, tmp_path
):
    assert client.get("/readyz").status_code == 200
    shutil.rmtree(archive_dir)
    archive_dir.write_bytes(b"not a directory")

    response = client.get("/readyz")

    assert response.status_code == 503
    assert response.headers["Retry-After"]
    error = response.get_json()["error"]
    assert error["code"] == "storage_not_ready"
    assert error["details"]["storage"] == [
        {"setting": "CHUNKWISE_ARCHIVE_DIR", "problem": "is not a directory"}
    ]
    assert "CHUNKWISE_ARCHIVE_DIR" in error["message"]
    assert str(tmp_path) not in str(response.get_json())


def test_the_coordinator_does_not_start_with_a_directory_it_cannot_create(app_config, tmp_path):
    (tmp_path / "a-file").write_bytes(b"")
    under_a_file = tmp_path / "a-file" / "archive"

    with pytest.raises(ConfigError) as caught:
        create_app({**app_config, "CHUNKWISE_ARCHIVE_DIR": str(under_a_file)})

    assert f"CHUNKWISE_ARCHIVE_DIR={under_a_file} cannot be created (ENOTDIR)" in str(caught.value)


def test_without_room_for_one_maximum_size_upload_the_coordinator_starts_warned_and_unready(
    app_config, caplog
):
    # Refusing to start would make gunicorn stop the whole coordinator when a worker process
    # is (re)booted on a full disk, and with it the worker protocol and job reads.
    larger_than_the_disk = str(10**15)

    with caplog.at_level("WARNING", logger="app.runtime"):
        flask_app = create_app({**app_config, "CHUNKWISE_MAX_UPLOAD_BYTES": larger_than_the_disk})
    try:
        ready = flask_app.test_client().get("/readyz")
    finally:
        close(flask_app.extensions["chunkwise.runtime"])

    warned = [r for r in caplog.records if getattr(r, "event", None) == "storage_low"]
    assert [r.setting for r in warned] == ["CHUNKWISE_TEMP_DIR", "CHUNKWISE_ARCHIVE_DIR"]
    assert all(app_config[r.setting] in r.getMessage() for r in warned)
    assert ready.status_code == 503
    assert ready.get_json()["error"]["code"] == "storage_not_ready"
    assert all(
        f"(CHUNKWISE_MAX_UPLOAD_BYTES={larger_than_the_disk})" in problem["problem"]
        for problem in ready.get_json()["error"]["details"]["storage"]
    )
