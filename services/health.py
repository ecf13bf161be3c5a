"""Readiness: storage takes an upload, the database answers, and its schema is up to date."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from repositories import health
from services import archive, coordinators
from services.archive import Archive
from services.errors import Unavailable
from services.runtime import Runtime

PROBE_PREFIX = ".probe-"  # never matches the stale-spool sweep's upload-*


@dataclass(frozen=True)
class StorageProblem:
    """One reason the temp directory or the archive cannot take uploads, by the setting to fix."""

    setting: str
    problem: str

    def __str__(self) -> str:
        return f"{self.setting} {self.problem}"


def storage_problems(temp_dir: Path, store: Archive, upload_bytes: int) -> list[StorageProblem]:
    """What keeps temp and archive from taking one upload of `upload_bytes`; [] if nothing."""
    return setup_problems(temp_dir, store) or space_problems(temp_dir, store, upload_bytes)


def setup_problems(temp_dir: Path, store: Archive) -> list[StorageProblem]:
    """Directories that are missing or cannot be written, a move between them that fails, or a
    bucket that cannot be written."""
    problems = []
    for role, directory in _directories(temp_dir, store):
        problem = _directory_problem(directory)
        if problem:
            problems.append(StorageProblem(archive.SETTING_OF_ROLE[role], problem))
    if isinstance(store, archive.LocalArchive):
        if not problems:
            problem = _move_problem(temp_dir, store.directory)
            if problem:
                problems.append(StorageProblem(store.setting, problem))
    else:
        problem = store.problem()
        if problem:
            problems.append(StorageProblem(store.setting, problem))
    return problems


def space_problems(temp_dir: Path, store: Archive, upload_bytes: int) -> list[StorageProblem]:
    """Directories with less room than one upload of `upload_bytes` (a bucket has no such limit)."""
    problems = []
    for role, directory in _directories(temp_dir, store):
        free = shutil.disk_usage(directory).free
        if free < upload_bytes:
            problems.append(
                StorageProblem(
                    archive.SETTING_OF_ROLE[role],
                    f"has {free} bytes free, less than one maximum-size upload "
                    f"(CHUNKWISE_MAX_UPLOAD_BYTES={upload_bytes})",
                )
            )
    return problems


def _directories(temp_dir: Path, store: Archive) -> list[tuple[str, Path]]:
    directories = [(archive.TEMP, temp_dir)]
    if isinstance(store, archive.LocalArchive):
        directories.append((archive.ARCHIVE, store.directory))
    return directories


def _directory_problem(directory: Path) -> str | None:
    if not directory.is_dir():
        return "is not a directory" if directory.exists() else "does not exist"
    try:
        # A real write: os.access() trusts permission bits that root ignores, and misses quotas.
        with tempfile.NamedTemporaryFile(dir=directory, prefix=PROBE_PREFIX) as probe:
            probe.write(b"ok")
            probe.flush()
    except OSError as exc:
        return f"cannot be written ({archive.errno_name(exc)})"
    return None


def _move_problem(temp_dir: Path, archive_dir: Path) -> str | None:
    # The same move an admitted upload makes (a rename, or a copy across filesystems).
    probe = temp_dir / f"{PROBE_PREFIX}{uuid.uuid4().hex}"
    target = archive_dir / probe.name
    try:
        probe.write_bytes(b"ok")
        archive.move_file(probe, target)
    except OSError as exc:
        return f"cannot receive a file from CHUNKWISE_TEMP_DIR ({archive.errno_name(exc)})"
    finally:
        probe.unlink(missing_ok=True)
        target.unlink(missing_ok=True)
    return None


def missing_migrations(rt: Runtime, expected: Sequence[str]) -> list[str]:
    """Migrations the code needs that the database lacks; Unavailable when it cannot say."""
    with rt.pool.connection(timeout=2.0) as conn:
        applied = health.applied_migrations(conn)
    return [m for m in expected if m not in applied]


def require_ready(rt: Runtime, expected: Sequence[str]) -> None:
    """Raise Unavailable naming the storage problems, the missing migrations (or that it knows
    none) or the shared settings that differ from an earlier coordinator's, if any."""
    problems = storage_problems(rt.temp_dir, rt.archive, rt.limits.max_upload_bytes)
    if problems:
        raise Unavailable(
            "storage cannot take uploads: " + "; ".join(str(p) for p in problems),
            code="storage_not_ready",
            details={"storage": [{"setting": p.setting, "problem": p.problem} for p in problems]},
        )
    if not expected:
        # An install without its sql/ would otherwise call an empty database current.
        raise Unavailable(
            "this coordinator knows no migrations: CHUNKWISE_MIGRATIONS_DIR holds no "
            "NNNN.name.sql, so it cannot tell whether the schema is there",
            code="no_migrations",
            details={"missing_migrations": []},
        )
    missing = missing_migrations(rt, expected)
    if missing:
        raise Unavailable(
            f"the schema is behind: apply {', '.join(missing)}",
            code="schema_behind",
            details={"missing_migrations": missing},
        )
    coordinators.require_agreement(rt)
