"""The input archive: uploaded files stored once, by SHA-256, outside PostgreSQL."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

TEMP_MAX_AGE_SECONDS = 24 * 3600


@dataclass(frozen=True)
class Upload:
    """A request body spooled to a temp file, hashed on the way in."""

    path: Path
    sha256: str
    size: int


def archive_path(archive_dir: Path, sha256: str) -> Path:
    """Where the bytes with this digest live."""
    return archive_dir / "sha256" / sha256[:2] / sha256


def input_uri(sha256: str) -> str:
    """The job's input_uri for archived bytes."""
    return f"archive:sha256:{sha256}"


def store(archive_dir: Path, upload: Upload) -> bool:
    """Move an upload into the archive; False when those bytes were already there."""
    target = archive_path(archive_dir, upload.sha256)
    if target.exists():
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    # os.replace is atomic on one filesystem; temp and archive directories should share one.
    os.replace(upload.path, target)
    return True


def remove_stale_temp_files(temp_dir: Path, now: float | None = None) -> int:
    """Delete spool files older than a day (left by crashed or abandoned uploads)."""
    now = time.time() if now is None else now
    removed = 0
    for path in temp_dir.glob("upload-*"):
        try:
            if now - path.stat().st_mtime > TEMP_MAX_AGE_SECONDS:
                path.unlink()
                removed += 1
        except FileNotFoundError:
            continue
    if removed:
        logger.info("stale temp files removed", extra={"event": "temp_cleanup", "count": removed})
    return removed
