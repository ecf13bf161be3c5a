"""E2E fixtures: the real stack (gunicorn and worker processes) over a fresh database."""

from __future__ import annotations

import pytest

from devstack.observe import FAST, Jobs
from devstack.stack import LocalStack


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


@pytest.fixture
def jobs(stack, db) -> Jobs:
    """Submit, read and wait for jobs on the running stack."""
    return Jobs(stack, db)
