"""Unusable storage stops the coordinator at start, and never a running one.

gunicorn's master checks the temp and archive directories once, before any worker process
boots; a worker process that boots later (a crash, a restart) only logs the problem, since
one that failed to boot would make gunicorn stop the whole coordinator.
"""

from __future__ import annotations

import os
import shutil
import signal
import time

import psutil
import pytest
import requests

from devstack.observe import FAST, events, wait_for
from devstack.stack import LocalStack


@pytest.fixture
def vault(tmp_path):
    """The archive directory's parent, which a test may replace with a regular file."""
    return tmp_path / "vault"


@pytest.fixture
def stack_env(vault) -> dict:
    """The archive under the vault."""
    return {**FAST, "CHUNKWISE_ARCHIVE_DIR": str(vault / "archive")}


def gunicorn_workers(stack: LocalStack) -> list[psutil.Process]:
    """The coordinator's worker processes."""
    return psutil.Process(stack.processes["coordinator"].pid).children()


def test_a_worker_process_booting_while_the_archive_is_unusable_keeps_the_coordinator_up(
    stack, vault, tmp_path
):
    wait_for(lambda: len(gunicorn_workers(stack)) == 2, timeout=20, what="two gunicorn workers")
    vault.rename(tmp_path / "vault-aside")
    vault.write_text("a file where the archive's parent should be")
    try:
        [victim, _] = gunicorn_workers(stack)
        os.kill(victim.pid, signal.SIGKILL)
        wait_for(
            lambda: (
                victim.pid not in {p.pid for p in gunicorn_workers(stack)}
                and len(gunicorn_workers(stack)) == 2
            ),
            timeout=20,
            what="a new gunicorn worker",
        )
        time.sleep(1)  # long enough for gunicorn to give up on a worker that failed to boot
        assert stack.processes["coordinator"].poll() is None, "the master stopped"
        assert events(stack, "coordinator", "storage_unusable")
        ready = wait_for(
            lambda: requests.get(f"{stack.url}/readyz", timeout=5).json().get("error"),
            timeout=10,
            what="/readyz to report the archive",
        )
        assert ready["code"] == "storage_not_ready"
    finally:
        vault.unlink()
        (tmp_path / "vault-aside").rename(vault)
    wait_for(
        lambda: requests.get(f"{stack.url}/readyz", timeout=5).status_code == 200,
        timeout=10,
        what="/readyz once the archive is back",
    )


def test_the_coordinator_refuses_to_start_with_an_unusable_archive(database_url, vault):
    stack = LocalStack(
        database_url=database_url,
        run_dir=vault.parent / "run",
        env={**FAST, "CHUNKWISE_ARCHIVE_DIR": str(vault / "archive")},
    )
    stack.prepare()
    shutil.rmtree(vault)
    vault.write_text("a file where the archive's parent should be")
    try:
        with pytest.raises(TimeoutError):
            stack.start_coordinator(timeout=10)
        assert stack.processes["coordinator"].wait(timeout=10) != 0
        log = (stack.logs / "coordinator.log").read_text()
        assert "CHUNKWISE_ARCHIVE_DIR" in log
    finally:
        stack.stop()
