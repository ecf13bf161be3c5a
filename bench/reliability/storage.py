"""An archive directory that stops taking writes while the coordinator runs.

Root ignores permission bits, so chmod cannot make a directory unwritable here. Two ways that
do work: the archive's parent becomes a regular file (ENOTDIR), always available; and the
archive on a tmpfs remounted read-only (EROFS), when this machine lets us mount.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import requests

from bench.reliability.figures import tally
from bench.reliability.harness import Bench, Rig
from devstack.sample_csv import generate_csv

SECRET = "reliability-dashboard-secret-key-0123456789"
# Small enough that a 16 MiB tmpfs counts as having room, so /readyz starts at 200.
MAX_UPLOAD = str(4 * 1024 * 1024)


def unwritable_archive(bench: Bench) -> dict:
    """Upload into a broken archive: 500 storage_unavailable naming the archive, nothing left."""
    rounds: list[dict] = []
    vault = bench.run_dir / "vault"
    env = {
        "CHUNKWISE_ARCHIVE_DIR": str(vault / "archive"),
        "CHUNKWISE_SECRET_KEY": SECRET,
        "CHUNKWISE_MAX_UPLOAD_BYTES": MAX_UPLOAD,
    }
    with bench.rig("archive-under-a-file", env=env) as rig:
        for _ in range(bench.rounds):
            rig.run_round(
                lambda n: _round(rig, n, _under_a_file(vault), vault), variant="under_a_file"
            )
        rig.run_round(lambda n: _respawn_round(rig, n, vault), variant="respawn_while_broken")
        rounds += rig.rounds
    with _tmpfs(bench.run_dir / "rodisk") as disk:
        if disk is None:
            skipped = "read-only tmpfs not tried: mount is not permitted here"
        else:
            skipped = None
            env = {
                "CHUNKWISE_ARCHIVE_DIR": str(disk / "archive"),
                "CHUNKWISE_SECRET_KEY": SECRET,
                "CHUNKWISE_MAX_UPLOAD_BYTES": MAX_UPLOAD,
            }
            with bench.rig("archive-read-only", env=env) as rig:
                for _ in range(bench.rounds):
                    rig.run_round(
                        lambda n: _round(rig, n, _read_only(disk), disk), variant="read_only_tmpfs"
                    )
                for r in rig.rounds:
                    r["round"] += len(rounds)
                rounds += rig.rounds
    return {
        "description": (
            "The coordinator starts with a working archive; then, while it runs, the archive "
            "stops taking writes: `under_a_file` replaces the archive's parent directory with "
            "a regular file (ENOTDIR); `read_only_tmpfs` remounts the tmpfs holding the "
            "archive read-only (EROFS). A CSV upload must get 500 `storage_unavailable` naming "
            "the archive's role and setting (never its path), `/readyz` 503 "
            "`storage_not_ready`, and no job row, task, outbox event, archive file or spool may "
            "be left. The archive is then repaired and the same upload must succeed with the "
            "sequential result. `respawn_while_broken`: with the archive under a file, one "
            "gunicorn worker process is SIGKILLed, as a crash or the OOM killer would; the "
            "coordinator must go on serving job reads (the replacement process meets the "
            "broken archive in its start checks)." + (f" ({skipped}.)" if skipped else "")
        ),
        "rounds": rounds,
        "figures": {
            "answers": tally(r["answer"] for r in rounds if "answer" in r),
            "readyz": tally(r["readyz"] for r in rounds if "readyz" in r),
            "rows_or_files_left_behind": sum(r.get("left_behind", 0) for r in rounds),
            "after_repair": tally(r["after_repair"] for r in rounds if "after_repair" in r),
            "survived_a_worker_respawn": tally(
                r.get("coordinator_alive") for r in rounds if "coordinator_alive" in r
            ),
        },
    }


@contextlib.contextmanager
def _under_a_file(vault: Path):
    """The archive's parent is a regular file until the block ends."""
    moved = vault.with_name("vault.moved")
    vault.rename(moved)
    vault.write_text("not a directory\n")
    try:
        yield
    finally:
        vault.unlink()
        moved.rename(vault)


@contextlib.contextmanager
def _read_only(disk: Path):
    """The tmpfs is read-only until the block ends."""
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True, capture_output=True)


@contextlib.contextmanager
def _tmpfs(mount_point: Path):
    """A 16 MiB tmpfs, or None where mounting is not allowed; unmounted afterwards."""
    mount_point.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount_point)],
        capture_output=True,
    )
    try:
        yield mount_point if mounted.returncode == 0 else None
    finally:
        if mounted.returncode == 0:
            subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _counts(rig: Rig) -> dict:
    return rig.db.execute(
        "SELECT (SELECT count(*) FROM jobs) AS jobs, (SELECT count(*) FROM tasks) AS tasks, "
        "(SELECT count(*) FROM outbox) AS outbox"
    ).fetchone()


def _files(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*") if p.is_file()} if root.is_dir() else set()


def _round(rig: Rig, n: int, broken, root: Path) -> dict:
    data = generate_csv(3_000, seed=300 + n)
    temp = rig.stack.run_dir / "tmp"
    rig.wait_booted()
    before = (_counts(rig), _files(root), _files(temp))
    errors_before = len(rig.events("coordinator", "storage_error"))
    with broken:
        answer = rig.jobs.post(data, 2)
        ready = requests.get(f"{rig.stack.url}/readyz", timeout=10)
    after = (_counts(rig), _files(root), _files(temp))
    body = answer.json()
    error = body.get("error", {})
    details = error.get("details", {})
    leaked = str(rig.stack.run_dir) in answer.text or str(root) in ready.text
    ready_code = ready.json().get("error", {}).get("code") if ready.status_code != 200 else ""
    rig.stack.wait_ready(10)
    again = rig.jobs.post(data, 2)
    exact = False
    if again.status_code == 201:
        rig.worker(f"worker-{n}", "--capacity", "2")
        exact = rig.exact(rig.wait_job(again.json()["id"], timeout=30), data)
    left = sum(a != b for a, b in zip(before, after, strict=True))
    return {
        "answer": f"{answer.status_code} {error.get('code')}",
        "details": details,
        "readyz": f"{ready.status_code} {ready_code}".strip(),
        "logged_storage_errors": len(rig.events("coordinator", "storage_error")) - errors_before,
        "left_behind": left,
        "path_in_answer": leaked,
        "after_repair": again.status_code,
        "exact": (
            answer.status_code == 500
            and error.get("code") == "storage_unavailable"
            and details.get("directory") == "archive"
            and details.get("setting") == "CHUNKWISE_ARCHIVE_DIR"
            and ready.status_code == 503
            and left == 0
            and not leaked
            and exact
        ),
    }


def _respawn_round(rig: Rig, n: int, vault: Path) -> dict:
    job = rig.jobs.submit(generate_csv(1_000, seed=400 + n), 1)
    rig.wait_booted()
    [name] = [
        k
        for k, p in rig.stack.processes.items()
        if k.startswith("coordinator") and p.poll() is None
    ]
    master = rig.stack.processes[name]
    with _under_a_file(vault):
        os.kill(psutil.Process(master.pid).children()[0].pid, signal.SIGKILL)
        deadline = time.monotonic() + 8
        while master.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        try:
            read = rig.jobs.session.get(f"{rig.stack.url}/api/v1/jobs/{job['id']}", timeout=5)
            job_read = str(read.status_code)
        except requests.RequestException as exc:
            job_read = type(exc).__name__
    alive = master.poll() is None
    if not alive:
        rig.stack.start_coordinator(f"coordinator-r{n}")
    return {
        "coordinator_alive": alive,
        "master_exit": master.returncode,
        "job_read": job_read,
        "exact": alive and job_read == "200",
    }
