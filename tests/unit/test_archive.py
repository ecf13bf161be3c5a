"""The input archive stores bytes once by digest, never half and durably; stale spools are swept
after a day."""

import errno
import hashlib
import os
import time
from pathlib import Path

import pytest

from app import uploads
from services import archive
from services.errors import StorageFull, StorageUnavailable


def spool(directory, content: bytes, name: str = "upload-1") -> archive.Upload:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(content)
    return archive.Upload(path=path, sha256=hashlib.sha256(content).hexdigest(), size=len(content))


def test_a_spools_digest_is_read_back_from_every_byte_it_holds(tmp_path):
    content = bytes(range(256)) * (archive.DIGEST_BLOCK_SIZE // 256 + 3) + b"tail"
    path = tmp_path / "upload-1"
    path.write_bytes(content)

    digest = archive.spool_sha256(archive.Spooled(path, len(content)))

    assert digest == hashlib.sha256(content).hexdigest()


def test_a_spool_that_cannot_be_read_back_is_storage_unavailable_naming_the_temp_directory(
    tmp_path,
):
    with pytest.raises(StorageUnavailable) as caught:
        archive.spool_sha256(archive.Spooled(tmp_path, 0))  # a directory, not a file

    assert caught.value.details == {
        "directory": "temp",
        "setting": "CHUNKWISE_TEMP_DIR",
        "reason": "EISDIR",
    }


def test_an_upload_is_moved_under_its_digest(tmp_path):
    upload = spool(tmp_path / "tmp", b"id,value\n1,2\n")

    assert archive.store(tmp_path / "archive", upload) is True

    stored = archive.archive_path(tmp_path / "archive", upload.sha256)
    assert stored.read_bytes() == b"id,value\n1,2\n"
    assert not upload.path.exists()


def test_a_stored_upload_is_named_on_disk_by_every_directory_above_it(tmp_path, monkeypatch):
    synced = record_fsyncs(monkeypatch)
    upload = spool(tmp_path / "tmp", b"id,value\n1,2\n")

    archive.store(tmp_path / "archive", upload)

    stored = archive.archive_path(tmp_path / "archive", upload.sha256)
    # The digest-prefix directory holds the file's entry; its parent, the new directory's.
    assert {inode(stored.parent), inode(stored.parent.parent)} <= synced


def test_a_spool_is_on_disk_once_its_finish_was_waited_for(tmp_path, monkeypatch):
    synced = record_fsyncs(monkeypatch)
    spooled = uploads.Spool(tmp_path)
    spooled.write(b"id,value\n1,2\n")

    upload = spooled.finish()
    upload.wait_until_on_disk()

    assert inode(upload.path) in synced
    assert upload.path.read_bytes() == b"id,value\n1,2\n"


def record_fsyncs(monkeypatch) -> set[int]:
    """The inodes fsync() is called on from now on."""
    synced: set[int] = set()
    real = os.fsync

    def recording(fd):
        synced.add(os.fstat(fd).st_ino)
        real(fd)

    monkeypatch.setattr(archive.os, "fsync", recording)
    return synced


def inode(path: Path) -> int:
    return path.stat().st_ino


def test_the_same_bytes_are_stored_once(tmp_path):
    first = spool(tmp_path / "tmp", b"same", "upload-1")
    second = spool(tmp_path / "tmp", b"same", "upload-2")

    assert archive.store(tmp_path / "archive", first) is True
    assert archive.store(tmp_path / "archive", second) is False
    assert len(list((tmp_path / "archive").rglob("*"))) == 3  # sha256/, ab/, the file


def test_spools_and_staged_copies_older_than_a_day_are_removed_and_younger_ones_kept(tmp_path):
    temp, store = tmp_path / "tmp", tmp_path / "archive"
    old = spool(temp, b"old", "upload-old").path
    young = spool(temp, b"young", "upload-young").path
    other = temp / "not-a-spool"
    other.write_bytes(b"keep")
    store.mkdir()
    old_copy, young_copy = store / ".incoming-old", store / ".incoming-young"
    old_copy.write_bytes(b"old")
    young_copy.write_bytes(b"young")
    day_and_a_bit = time.time() - archive.TEMP_MAX_AGE_SECONDS - 60
    for path in (old, other, old_copy):
        os.utime(path, (day_and_a_bit, day_and_a_bit))

    assert archive.remove_stale_temp_files(temp, store) == 2

    assert not old.exists() and not old_copy.exists()
    assert young.exists() and young_copy.exists()
    assert other.exists()


def test_a_copy_across_filesystems_that_runs_out_of_space_leaves_no_partial_file(
    tmp_path, monkeypatch
):
    upload = spool(tmp_path / "tmp", b"id,value\n1,2\n" * 100)
    real_replace = os.replace

    def rename_across_devices(src, dst):
        if Path(src).parent == upload.path.parent:
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), str(src), None, str(dst))
        return real_replace(src, dst)

    def disk_fills_halfway(src, dst, length):
        dst.write(src.read(100))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(archive.os, "replace", rename_across_devices)
    monkeypatch.setattr(archive.shutil, "copyfileobj", disk_fills_halfway)

    with pytest.raises(StorageFull) as caught:
        archive.store(tmp_path / "archive", upload)

    assert caught.value.details == {
        "directory": "archive",
        "setting": "CHUNKWISE_ARCHIVE_DIR",
        "reason": "ENOSPC",
    }
    assert [p for p in (tmp_path / "archive").rglob("*") if p.is_file()] == []
    assert upload.path.exists()  # submit_csv_job removes the spool, whatever happened


def mode_of(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.fixture
def open_umask():
    """A umask that would leave new files 0666 and directories 0777: only explicit modes count."""
    previous = os.umask(0)
    yield
    os.umask(previous)


def test_a_spool_is_created_0600_in_a_new_0700_directory(tmp_path, open_umask):
    spooled = uploads.Spool(tmp_path / "tmp")
    spooled.write(b"id,value\n1,2\n")

    upload = spooled.finish()

    assert mode_of(upload.path) == 0o600
    assert mode_of(tmp_path / "tmp") == 0o700


def test_an_archived_input_is_0600_under_0700_digest_directories(tmp_path, open_umask):
    spool = uploads.Spool(tmp_path / "tmp")
    spool.write(b"id,value\n1,2\n")
    spooled = spool.finish()
    upload = archive.Upload(spooled.path, archive.spool_sha256(spooled), spooled.size)

    archive.store(tmp_path / "archive", upload)

    stored = archive.archive_path(tmp_path / "archive", upload.sha256)
    assert mode_of(stored) == 0o600
    assert mode_of(stored.parent) == mode_of(stored.parent.parent) == 0o700


def test_a_copy_across_filesystems_is_created_0600(tmp_path, monkeypatch, open_umask):
    upload = spool(tmp_path / "tmp", b"id,value\n1,2\n")
    real_replace = os.replace

    def rename_across_devices(src, dst):
        if Path(src).parent == upload.path.parent:
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), str(src), None, str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(archive.os, "replace", rename_across_devices)

    archive.store(tmp_path / "archive", upload)

    assert mode_of(archive.archive_path(tmp_path / "archive", upload.sha256)) == 0o600


def test_an_existing_directory_keeps_the_mode_its_operator_gave_it(tmp_path, open_umask):
    shared = tmp_path / "tmp"
    shared.mkdir(mode=0o750)

    upload = uploads.Spool(shared).finish()

    assert mode_of(shared) == 0o750
    assert mode_of(upload.path) == 0o600


def test_every_directory_a_spool_creates_above_it_is_0700(tmp_path, open_umask):
    uploads.Spool(tmp_path / "run" / "tmp").finish()

    assert mode_of(tmp_path / "run") == mode_of(tmp_path / "run" / "tmp") == 0o700
