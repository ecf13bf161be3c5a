"""The input archive: uploaded files stored once, by SHA-256, outside PostgreSQL."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO, Protocol

from services.errors import ArchiveUnavailable, StorageFull, StorageUnavailable

logger = logging.getLogger(__name__)

TEMP_MAX_AGE_SECONDS = 24 * 3600

# The two directories by the role users see in errors, and the setting an operator fixes.
TEMP = "temp"
ARCHIVE = "archive"
SETTING_OF_ROLE = {TEMP: "CHUNKWISE_TEMP_DIR", ARCHIVE: "CHUNKWISE_ARCHIVE_DIR"}
OUT_OF_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
COPY_BLOCK_SIZE = 1024 * 1024
# A copy on its way into the archive: named so, it is never taken for an archived input.
INCOMING = ".incoming-"
# Uploads are users' data: spools and archived inputs are the coordinator's user's alone.
# Directories Chunkwise creates get 0700; one that already exists keeps the mode its operator
# gave it (it may be a mount point, or shared with a backup group on purpose), while every
# file created in it is 0600 either way.
PRIVATE_DIRECTORY = 0o700
PRIVATE_FILE = 0o600


@dataclass(frozen=True)
class Spooled:
    """A request body spooled to a temp file; its digest is taken beside the split, and so is
    its sync to disk when `synced` is that sync, still under way."""

    path: Path
    size: int
    synced: Future[None] | None = None

    def wait_until_on_disk(self) -> None:
        """Return once its bytes are on disk; StorageFull or StorageUnavailable if they
        cannot be."""
        if self.synced is not None:
            self.synced.result()


@dataclass(frozen=True)
class Upload:
    """A spooled file with its SHA-256: what the archive keeps."""

    path: Path
    sha256: str
    size: int


# A spool is read back for its digest this much at a time: hashlib lets go of the GIL for each
# block, so a split running beside it in numpy waits on it rarely.
DIGEST_BLOCK_SIZE = 2 * 1024 * 1024


def spool_sha256(spooled: Spooled, cancelled: threading.Event | None = None) -> str | None:
    """The spooled file's SHA-256, read a block at a time; StorageUnavailable if it cannot be
    read; None, read no further, once `cancelled` is set."""
    digest = hashlib.sha256()
    block = bytearray(DIGEST_BLOCK_SIZE)
    try:
        with spooled.path.open("rb", buffering=0) as f, memoryview(block) as view:
            while read := f.readinto(block):
                if cancelled is not None and cancelled.is_set():
                    return None
                digest.update(view[:read])
    except OSError as exc:
        raise storage_failure(exc, TEMP, "read") from exc
    return digest.hexdigest()


class Archive(Protocol):
    """Where admitted uploads are kept: a local directory, or an S3-compatible bucket."""

    # The setting an operator fixes when the archive fails, named in errors and probes.
    setting: str

    def stage(self, upload: Upload) -> Upload:
        """Make storing the upload cheap or needless; runs before admission's transaction."""

    def store(self, staged: Upload) -> bool:
        """Keep a staged upload for good, inside admission's transaction; False if already kept."""

    def open_range(self, sha256: str, offset: int, length: int) -> BinaryIO:
        """A reader of length bytes from offset; ArchiveUnavailable before any byte if it cannot."""

    def problem(self) -> str | None:
        """Why the archive cannot take an upload now, or None."""

    def stored_before(self, cutoff: float) -> Iterator[str]:
        """The digests of inputs last stored or reused before `cutoff` (a Unix time)."""

    def remove_if_before(self, sha256: str, cutoff: float) -> bool:
        """Delete an input unless it was stored or reused since `cutoff`; True if deleted."""


@dataclass(frozen=True)
class LocalArchive:
    """The single-host archive: files under CHUNKWISE_ARCHIVE_DIR, renamed in from the spool."""

    directory: Path
    setting: str = SETTING_OF_ROLE[ARCHIVE]

    def stage(self, upload: Upload) -> Upload:
        """The upload on the archive's filesystem (see stage())."""
        return stage(self.directory, upload)

    def store(self, staged: Upload) -> bool:
        """Rename the staged upload into the archive (see store())."""
        return store(self.directory, staged)

    def open_range(self, sha256: str, offset: int, length: int) -> BinaryIO:
        """The archived file, opened and positioned at offset."""
        try:
            f = archive_path(self.directory, sha256).open("rb")
        except FileNotFoundError as exc:
            raise input_not_here(self.setting) from exc
        except OSError as exc:
            raise ArchiveUnavailable(
                f"the archive cannot be read ({errno_name(exc)}); retry, another coordinator may",
                details={"setting": self.setting, "reason": errno_name(exc)},
            ) from exc
        f.seek(offset)
        return f

    def problem(self) -> str | None:
        """Checked by services/health.py with the temp directory, as a move between them."""
        return None

    def stored_before(self, cutoff: float) -> Iterator[str]:
        """Archived files whose mtime (set when stored, touched when reused) is before cutoff."""
        for path in (self.directory / "sha256").glob("*/*"):
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_mtime < cutoff and not path.name.startswith(INCOMING):
                    yield path.name

    def remove_if_before(self, sha256: str, cutoff: float) -> bool:
        """Unlink the file unless an upload touched it since the sweep listed it."""
        path = archive_path(self.directory, sha256)
        try:
            if path.stat().st_mtime >= cutoff:
                return False
            path.unlink()
        except FileNotFoundError:
            return False
        return True


def input_not_here(setting: str) -> ArchiveUnavailable:
    """The 503 for an archived input this coordinator does not have (another one may)."""
    return ArchiveUnavailable(
        "this coordinator does not have the task's input; retry, another coordinator may",
        code="input_not_here",
        details={"setting": setting},
    )


def archive_path(archive_dir: Path, sha256: str) -> Path:
    """Where the bytes with this digest live."""
    return archive_dir / "sha256" / sha256[:2] / sha256


def input_uri(sha256: str) -> str:
    """The job's input_uri for archived bytes."""
    return f"archive:sha256:{sha256}"


def storage_failure(
    exc: OSError, role: str, failed: str = "written"
) -> StorageFull | StorageUnavailable:
    """The service error for a failed write into the temp or archive directory, or a failed
    read (failed="read") of a spool there."""
    # The answer names the role and the setting, never the path: that would tell a caller
    # about the host's layout. The coordinator logs the path from the chained OSError.
    reason = errno_name(exc)
    setting = SETTING_OF_ROLE[role]
    details = {"directory": role, "setting": setting, "reason": reason}
    if exc.errno in OUT_OF_SPACE:
        return StorageFull(
            f"the {role} directory is out of space ({reason}); an operator must free space "
            f"under {setting}",
            details=details,
        )
    return StorageUnavailable(
        f"the {role} directory cannot be {failed} ({reason}); an operator must fix {setting}",
        details=details,
    )


def errno_name(exc: OSError) -> str:
    """The symbolic name of an OSError's errno (ENOSPC, EACCES, ...), safe to show anyone."""
    return errno.errorcode.get(exc.errno or 0, type(exc).__name__)


def stage(archive_dir: Path, upload: Upload) -> Upload:
    """The upload on the archive's filesystem, so that storing it is a rename.

    Called before admission's transaction: a copy across filesystems is a pass over the file,
    and inside the transaction it would hold the queue's bound row, on which every other
    admission of the workload waits. The caller removes the staged file if it is not stored.
    """
    try:
        if archive_path(archive_dir, upload.sha256).exists():
            return upload
        if os.stat(upload.path).st_dev == os.stat(archive_dir).st_dev:
            return upload
        staged = archive_dir / f"{INCOMING}{uuid.uuid4().hex}"
        _durable_copy(upload.path, staged)
    except OSError as exc:
        raise storage_failure(exc, ARCHIVE) from exc
    return replace(upload, path=staged)


def store(archive_dir: Path, upload: Upload) -> bool:
    """Move an upload into the archive; False when those bytes were already there."""
    target = archive_path(archive_dir, upload.sha256)
    try:
        if target.exists():
            # Touched, so the retention sweep sees these bytes as in use again.
            os.utime(target)
            return False
        make_private_directory(target.parent)
        move_file(upload.path, target)
        # The digest-prefix directory may be new: its own entry must be on disk as well.
        sync_to_disk(target.parent.parent)
    except OSError as exc:
        raise storage_failure(exc, ARCHIVE) from exc
    return True


def move_file(source: Path, target: Path) -> None:
    """Rename a file into place, or copy it there durably when it is on another filesystem.

    Either way the target's directory entry is on disk when this returns; a renamed file's
    bytes are the caller's to have synced (an upload's spool syncs them as it finishes).
    """
    try:
        # Atomic: a failure leaves nothing at the target.
        os.replace(source, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        _copy_into_place(source, target)
    sync_to_disk(target.parent)


def _copy_into_place(source: Path, target: Path) -> None:
    # Copied beside the target, made durable, then renamed into place: readers never see a
    # partial file (a crash mid-copy leaves only an .incoming file no job refers to).
    partial = target.with_name(f"{INCOMING}{uuid.uuid4().hex}")
    _durable_copy(source, partial)
    try:
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    source.unlink()


def _durable_copy(source: Path, copy: Path) -> None:
    # A failure removes the copy.
    try:
        with source.open("rb") as src, open(copy, "xb", opener=private_opener) as dst:
            shutil.copyfileobj(src, dst, COPY_BLOCK_SIZE)
            dst.flush()
            os.fsync(dst.fileno())
    except BaseException:
        copy.unlink(missing_ok=True)
        raise


def make_private_directory(path: Path) -> None:
    """mkdir -p, each directory it creates 0700 (mkdir(parents=True) gives parents the umask's)."""
    missing = []
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    for directory in [*reversed(missing), path]:
        # exist_ok: a file holding the name still fails (EEXIST), as plain mkdir would.
        directory.mkdir(mode=PRIVATE_DIRECTORY, exist_ok=True)


def private_opener(path: str | Path, flags: int) -> int:
    """open()'s opener for a file created 0600: never, even for a moment, readable by others."""
    return os.open(path, flags, PRIVATE_FILE)


def sync_to_disk(path: Path) -> None:
    """fsync a file's bytes, or a directory's entries (a rename is durable only once they are)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_stale_temp_files(temp_dir: Path, archive_dir: Path, now: float | None = None) -> int:
    """Delete spool files and copies on their way into the archive older than a day (left by
    crashed or abandoned uploads)."""
    now = time.time() if now is None else now
    removed = 0
    for path in [*temp_dir.glob("upload-*"), *archive_dir.glob(f"{INCOMING}*")]:
        try:
            if now - path.stat().st_mtime > TEMP_MAX_AGE_SECONDS:
                path.unlink()
                removed += 1
        except FileNotFoundError:
            continue
    if removed:
        logger.info("stale temp files removed", extra={"event": "temp_cleanup", "count": removed})
    return removed
