"""The upload spool turns a full disk into StorageFull, even when only the final flush meets it.

/dev/full is a real device whose every write fails with ENOSPC, so the buffered spool file
accepts a small write and fails when it is flushed on close.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from app.uploads import HashingSpool
from services.errors import StorageFull, StorageUnavailable

DEV_FULL = Path("/dev/full")


@pytest.fixture
def spool_on_a_full_device(tmp_path):
    """A spool whose file is /dev/full."""
    if not DEV_FULL.exists():
        pytest.skip("no /dev/full here")
    spool = HashingSpool(tmp_path)
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
        HashingSpool(tmp_path / "a-file" / "tmp")

    assert caught.value.details["reason"] == "ENOTDIR"
