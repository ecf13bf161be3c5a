"""The storage check behind start-up and /readyz, and the archive move across filesystems.

Every fault here is real: a missing directory, a regular file in its place, a free-space need
larger than the disk, a read-only tmpfs (skipped where mounting is not allowed), and /dev/shm
as a second filesystem (skipped where it is the same one).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from services import archive
from services.health import storage_problems

ONE_MIB = 1024 * 1024


@pytest.fixture
def dirs(tmp_path) -> tuple[Path, Path]:
    """A temp and an archive directory on one filesystem."""
    temp, kept = tmp_path / "tmp", tmp_path / "archive"
    temp.mkdir()
    kept.mkdir()
    return temp, kept


@pytest.fixture
def read_only_dir(tmp_path) -> Path:
    """A read-only tmpfs, where even root gets EROFS."""
    mount_point = tmp_path / "ro"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount_point)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=False)


@pytest.fixture
def other_filesystem(tmp_path) -> Path:
    """A directory on another filesystem than tmp_path."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second filesystem at /dev/shm")
    directory = shm / f"chunkwise-test-{os.getpid()}-{tmp_path.name}"
    directory.mkdir()
    yield directory
    for path in sorted(directory.rglob("*"), reverse=True):
        with contextlib.suppress(OSError):
            path.unlink() if not path.is_dir() else path.rmdir()
    directory.rmdir()


def test_writable_directories_with_room_have_no_problems_and_keep_no_probe_files(dirs):
    temp, kept = dirs

    assert storage_problems(temp, archive.LocalArchive(kept), ONE_MIB) == []

    assert list(temp.iterdir()) == [] and list(kept.iterdir()) == []


def test_a_missing_archive_directory_names_its_setting(dirs):
    temp, kept = dirs
    kept.rmdir()

    [problem] = storage_problems(temp, archive.LocalArchive(kept), ONE_MIB)

    assert str(problem) == "CHUNKWISE_ARCHIVE_DIR does not exist"


def test_a_regular_file_for_the_temp_directory_names_its_setting(dirs):
    temp, kept = dirs
    temp.rmdir()
    temp.write_bytes(b"")

    [problem] = storage_problems(temp, archive.LocalArchive(kept), ONE_MIB)

    assert str(problem) == "CHUNKWISE_TEMP_DIR is not a directory"


def test_less_free_space_than_one_maximum_upload_is_a_problem_for_each_directory(dirs):
    temp, kept = dirs
    larger_than_any_disk = 10**18

    problems = storage_problems(temp, archive.LocalArchive(kept), larger_than_any_disk)

    assert [p.setting for p in problems] == ["CHUNKWISE_TEMP_DIR", "CHUNKWISE_ARCHIVE_DIR"]
    assert all(
        f"less than one maximum-size upload (CHUNKWISE_MAX_UPLOAD_BYTES={larger_than_any_disk})"
        in p.problem
        for p in problems
    )


def test_a_read_only_archive_directory_cannot_be_written(dirs, read_only_dir):
    temp, _ = dirs

    [problem] = storage_problems(temp, archive.LocalArchive(read_only_dir), ONE_MIB)

    assert str(problem) == "CHUNKWISE_ARCHIVE_DIR cannot be written (EROFS)"


def test_directories_on_two_filesystems_pass_because_the_move_copies(tmp_path, other_filesystem):
    kept = tmp_path / "archive"
    kept.mkdir()

    assert storage_problems(other_filesystem, archive.LocalArchive(kept), ONE_MIB) == []

    assert list(other_filesystem.iterdir()) == [] and list(kept.iterdir()) == []


def test_an_upload_is_copied_durably_into_an_archive_on_another_filesystem(
    tmp_path, other_filesystem
):
    content = b"id,value\n1,2\n" * 1000
    spool = other_filesystem / "upload-1"
    spool.write_bytes(content)
    upload = archive.Upload(spool, hashlib.sha256(content).hexdigest(), len(content))

    assert archive.store(tmp_path / "archive", upload) is True

    stored = archive.archive_path(tmp_path / "archive", upload.sha256)
    assert stored.read_bytes() == content
    assert not spool.exists()
    assert [p.name for p in stored.parent.iterdir()] == [upload.sha256]  # no .incoming left
