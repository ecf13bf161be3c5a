"""The upload spool keeps every byte it is given, and turns a full disk into StorageFull, even
when only the final flush meets it; a writeback that fails while it spools fails its finish.

/dev/full is a real device whose every write fails with ENOSPC, so the buffered spool file
accepts a small write and fails when it is flushed on close.
"""

from __future__ import annotations

import errno
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


def test_a_writeback_failed_while_spooling_fails_the_finish(tmp_path, monkeypatch):
    def failing(fd):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(uploads.os, "fdatasync", failing)
    spool = Spool(tmp_path)
    for _ in range(2 * EARLY_SYNC_BYTES // (1 << 20)):
        spool.write(bytes(1 << 20))

    with pytest.raises(StorageUnavailable) as caught:
        spool.finish()

    assert caught.value.details["reason"] == "EIO"
