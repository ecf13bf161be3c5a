"""A really full disk on the real stack: 507 from gunicorn, one try by the CLI, /readyz says why.

The temp and archive directories live on a 4 MiB tmpfs (this needs root and mount; the test is
skipped without them), and a filler file leaves too little room for the upload, so the spool
meets a real ENOSPC.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from app.ui_session import SECRET_KEY_FILE
from devstack.observe import FAST, events
from devstack.sample_csv import generate_csv

CHUNKWISE = str(Path(sys.executable).parent / "chunkwise")
MAX_UPLOAD = 1024 * 1024


@pytest.fixture
def small_disk(tmp_path) -> Path:
    """A 4 MiB tmpfs, unmounted after the stack has stopped."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount_point)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


@pytest.fixture
def stack_env(small_disk) -> dict:
    """Both directories on the small disk, and uploads limited to 1 MiB so the stack starts."""
    return {
        **FAST,
        "CHUNKWISE_TEMP_DIR": str(small_disk / "tmp"),
        "CHUNKWISE_ARCHIVE_DIR": str(small_disk / "archive"),
        "CHUNKWISE_MAX_UPLOAD_BYTES": str(MAX_UPLOAD),
    }


def chunkwise_submit(stack, csv_file: Path) -> subprocess.CompletedProcess:
    """Run `chunkwise submit` as the user."""
    env = {**os.environ, "CHUNKWISE_URL": stack.url, "CHUNKWISE_TOKEN": stack.tokens.user}
    return subprocess.run(
        [CHUNKWISE, "submit", str(csv_file), "--column", "value", "--chunks", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def fill(disk: Path, leave_free: int) -> Path:
    """Write a filler file until only about `leave_free` bytes of the disk are free."""
    filler = disk / "filler"
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    filler.write_bytes(b"\0" * (free - leave_free))
    return filler


def test_a_full_disk_is_507_tried_once_by_the_cli_and_reported_by_readyz(
    stack, small_disk, db, tmp_path
):
    csv_file = tmp_path / "data.csv"
    csv_file.write_bytes(generate_csv(20_000, seed=4)[: 900 * 1024].rsplit(b"\n", 1)[0] + b"\n")
    filler = fill(small_disk, leave_free=256 * 1024)

    failed = chunkwise_submit(stack, csv_file)

    assert failed.returncode == 3, failed.stderr
    assert "insufficient_storage: the temp directory is out of space (ENOSPC)" in failed.stderr
    assert "(HTTP 507)" in failed.stderr and str(small_disk) not in failed.stderr
    assert len(events(stack, "coordinator", "storage_error")) == 1, "the CLI sent it again"
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0
    # Nothing of the upload is left; the dashboard's session key may share the disk.
    kept = {p.name for p in small_disk.rglob("*") if p.is_file()} - {SECRET_KEY_FILE}
    assert kept == {"filler"}

    ready = requests.get(f"{stack.url}/readyz", timeout=10)
    assert ready.status_code == 503
    problems = ready.json()["error"]["details"]["storage"]
    # Both directories are on the full disk.
    assert [p["setting"] for p in problems] == ["CHUNKWISE_TEMP_DIR", "CHUNKWISE_ARCHIVE_DIR"]
    assert all(f"(CHUNKWISE_MAX_UPLOAD_BYTES={MAX_UPLOAD})" in p["problem"] for p in problems)
    assert str(small_disk) not in ready.text

    # A gunicorn worker booting meanwhile warns instead of failing, which would end the master.
    assert stack.processes["coordinator"].poll() is None

    filler.unlink()
    assert requests.get(f"{stack.url}/readyz", timeout=10).status_code == 200
    submitted = chunkwise_submit(stack, csv_file)
    assert submitted.returncode == 0, submitted.stderr
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 1
