"""Uploaded data is the coordinator's user's alone: files 0600 in directories 0700."""

from __future__ import annotations

from pathlib import Path

from devstack.sample_csv import generate_csv
from tests.integration.csv_worker import files_under, upload


def mode_of(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_coordinator_creates_its_temp_and_archive_directories_0700(app, temp_dir, archive_dir):
    assert mode_of(temp_dir) == mode_of(archive_dir) == 0o700


def test_an_uploaded_csv_is_archived_0600_under_0700_directories(client, headers, archive_dir):
    response = upload(client, headers["user"], generate_csv(100, seed=5))

    assert response.status_code == 201, response.get_json()
    [stored] = files_under(archive_dir)
    assert mode_of(stored) == 0o600
    for directory in (stored.parent, stored.parent.parent, archive_dir):
        assert mode_of(directory) == 0o700
