"""E2E fixtures: the real stack (gunicorn and worker processes) over a fresh database."""

from __future__ import annotations

import time

import pytest

from bench.stack import LocalStack

# Short timings keep the suite quick; the test of the default timings overrides them.
FAST = {"CHUNKWISE_LEASE_SECONDS": "4", "CHUNKWISE_HEARTBEAT_SECONDS": "1",
        "CHUNKWISE_MAINTENANCE_SECONDS": "0.5", "CHUNKWISE_LOG_LEVEL": "INFO"}


@pytest.fixture
def stack_env() -> dict:
    """Environment for every process of the stack; override in a test module to change it."""
    return dict(FAST)


@pytest.fixture
def stack(database_url, tmp_path, stack_env):
    """Migrated, seeded, with the coordinator running; workers are started by each test."""
    local = LocalStack(database_url=database_url, run_dir=tmp_path / "run", env=stack_env)
    local.prepare()
    local.start_coordinator()
    yield local
    local.stop()


def wait_for(predicate, timeout: float, interval: float = 0.1, what: str = "condition"):
    """Poll until predicate() is truthy; return its value or fail after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
