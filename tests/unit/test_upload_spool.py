"""The upload spool keeps every byte it is given, and turns a full disk into StorageFull, even
when only the final flush meets it; its finish returns while its writeback and sync go on, and a
writeback or sync that fails fails the wait for them.

/dev/full is a real device whose every write fails with ENOSPC, so the buffered spool file
accepts a small write and fails when it is flushed on close.
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from app import uploads
from app.uploads import EARLY_SYNC_BYTES, Spool
from services.errors import StorageFull, StorageUnavailable

DEV_FULL = Path("/dev/full")


@pytest.fixture
def spool_on_a_full_device(tmp_path):
    """A spool whose file is /dev/full."""
    if not DEV_FULL.exists():
        pytest.skip("no /dev/full here")
    spool = Spool(tmp_path)
    spool._file.close()
    spool._file = DEV_FULL.open("wb")
    return spool


def test_a_full_disk_met_when_the_spool_is_flushed_is_storage_full(spool_on_a_full_device):
    spool_on_a_full_device.write(b"id,value\n1,2\n")  # fits the buffer

    with pytest.raises(StorageFull) as caught:
        spool_on_a_full_device.finish()

    assert caught.value.details == {
        "directory": "temp",
        "setting": "CHUNKWISE_TEMP_DIR",
        "reason": errno.errorcode[errno.ENOSPC],
    }
    spool_on_a_full_device.close()  # the request's teardown closes again: no second error


def test_a_spool_that_cannot_be_created_is_storage_unavailable(tmp_path):
    (tmp_path / "a-file").write_bytes(b"")

    with pytest.raises(StorageUnavailable) as caught:
        Spool(tmp_path / "a-file" / "tmp")

    assert caught.value.details["reason"] == "ENOTDIR"


def test_the_spool_keeps_every_byte_written_in_any_pieces_even_a_reused_buffer(tmp_path):
    # Its writeback is asked for twice on the way.
    content = bytes(range(256)) * (2 * EARLY_SYNC_BYTES // 256 + 7)
    spool = Spool(tmp_path)
    reused = bytearray()
    for at in range(0, len(content), 100_003):
        reused[:] = content[at : at + 100_003]
        spool.write(reused)  # the caller overwrites it next time round

    spooled = spool.finish()

    assert spooled.size == len(content)
    assert spooled.path.read_bytes() == content


def test_a_writeback_failed_while_spooling_fails_the_wait_until_on_disk(tmp_path, monkeypatch):
    def failing(fd):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(uploads.os, "fdatasync", failing)
    spool = Spool(tmp_path)
    for _ in range(2 * EARLY_SYNC_BYTES // (1 << 20)):
        spool.write(bytes(1 << 20))
    spooled = spool.finish()

    with pytest.raises(StorageUnavailable) as caught:
        spooled.wait_until_on_disk()

    assert caught.value.details["reason"] == "EIO"


def test_finishing_a_spool_returns_while_its_writeback_is_under_way(tmp_path, monkeypatch):
    release, synced = threading.Event(), []
    fdatasync = uploads.os.fdatasync

    def slow_writeback(fd):
        release.wait(10)
        fdatasync(fd)

    monkeypatch.setattr(uploads.os, "fdatasync", slow_writeback)
    monkeypatch.setattr(uploads, "sync_to_disk", synced.append)
    spool = Spool(tmp_path)
    spool.write(bytes(EARLY_SYNC_BYTES))  # its writeback is asked for

    spooled = spool.finish()

    assert not spooled.synced.done() and synced == []
    release.set()
    spooled.wait_until_on_disk()
    assert synced == [spooled.path]


def test_finishing_a_spool_returns_while_its_sync_to_disk_is_under_way(tmp_path, monkeypatch):
    release, synced = threading.Event(), []

    def slow_sync(path):
        release.wait(10)
        synced.append(path)

    monkeypatch.setattr(uploads, "sync_to_disk", slow_sync)
    spool = Spool(tmp_path)
    spool.write(b"id,value\n1,2\n")

    spooled = spool.finish()

    assert not spooled.synced.done()
    release.set()
    spooled.wait_until_on_disk()
    assert synced == [spooled.path]


@pytest.mark.parametrize(
    ("code", "error"), [(errno.EIO, StorageUnavailable), (errno.ENOSPC, StorageFull)]
)
def test_a_sync_that_fails_after_the_finish_fails_the_wait_until_on_disk(
    tmp_path, monkeypatch, code, error
):
    def failing(path):
        raise OSError(code, "the write back failed")

    monkeypatch.setattr(uploads, "sync_to_disk", failing)
    spooled = Spool(tmp_path).finish()

    with pytest.raises(error) as caught:
        spooled.wait_until_on_disk()

    assert caught.value.details["reason"] == errno.errorcode[code]
