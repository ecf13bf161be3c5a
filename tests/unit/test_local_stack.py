"""make run's stack keeps its tokens private and across restarts; workers get only their own;
following a job stops once the stack can no longer finish it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from devstack.stack import LocalStack, StackStopped, Tokens, kept_tokens


def mode_of(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_tokens_are_kept_0600_in_a_0700_directory_and_reused(tmp_path):
    first = kept_tokens(tmp_path / "secrets")
    again = kept_tokens(tmp_path / "secrets")

    assert again == first
    assert mode_of(tmp_path / "secrets") == 0o700
    assert mode_of(tmp_path / "secrets" / "tokens.json") == 0o600
    assert json.loads((tmp_path / "secrets" / "tokens.json").read_text()) == vars(first)


def test_an_older_runs_secrets_directory_and_file_are_narrowed(tmp_path):
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir(mode=0o755)
    older = Tokens()
    (secrets_dir / "tokens.json").write_text(json.dumps(vars(older)))
    (secrets_dir / "tokens.json").chmod(0o644)

    assert kept_tokens(secrets_dir) == older
    assert mode_of(secrets_dir) == 0o700
    assert mode_of(secrets_dir / "tokens.json") == 0o600


def test_a_token_missing_from_an_older_file_is_added_and_the_rest_kept(tmp_path):
    older = Tokens()
    kept = {"user": older.user, "operator": older.operator, "worker": older.worker}
    (tmp_path / "tokens.json").write_text(json.dumps(kept))

    tokens = kept_tokens(tmp_path)

    assert (tokens.user, tokens.operator, tokens.worker) == (
        older.user,
        older.operator,
        older.worker,
    )
    assert len(tokens.metrics) >= 32
    assert kept_tokens(tmp_path) == tokens


def test_a_worker_is_given_its_own_token_and_neither_the_database_nor_other_tokens(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1/x")
    monkeypatch.setenv("PGPASSWORD", "secret")
    monkeypatch.setenv("CHUNKWISE_TOKEN", "cwu_" + "t" * 43)
    stack = LocalStack(
        database_url="postgresql://postgres@127.0.0.1/chunkwise",
        run_dir=tmp_path,
        env={"CHUNKWISE_SECRET_KEY": "k" * 40, "CHUNKWISE_LOG_LEVEL": "INFO"},
    )

    env = stack.worker_env()

    assert env["CHUNKWISE_WORKER_TOKEN"] == stack.tokens.worker
    assert env["CHUNKWISE_URL"] == stack.url
    assert env["CHUNKWISE_LOG_LEVEL"] == "INFO"
    leaked = [
        name
        for name, value in env.items()
        if "DATABASE_URL" in name
        or name.startswith("PG")
        or value in (stack.tokens.user, stack.tokens.operator, stack.tokens.metrics)
        or name in ("CHUNKWISE_TOKEN", "CHUNKWISE_SECRET_KEY")
    ]
    assert leaked == []
    assert "postgresql://" not in json.dumps(env)


def exited(code: int) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])
    process.wait()
    return process


def running() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])


class QueuedJobWatch:
    """A coordinator's watch that never sees the job change (a follow that kept waiting fails
    at its third answer, where it would wait for good)."""

    answers = 0

    def watch_job(self, job_id, version, *, wait_seconds, until_finished):
        assert until_finished, "a follow waits for the job's end, not for every change"
        self.answers += 1
        assert self.answers < 3, "the follow kept waiting on a stack that cannot end the job"
        return None, version


@pytest.fixture
def stack(tmp_path):
    stack = LocalStack(database_url="postgresql://unused", run_dir=tmp_path)
    yield stack
    for process in stack.processes.values():
        process.kill()
        process.wait()


def test_following_a_job_stops_when_every_worker_has_exited(stack):
    stack.coordinators.add("coordinator")
    stack.processes.update(coordinator=running(), **{"worker-1": exited(1), "worker-2": exited(3)})

    with pytest.raises(StackStopped, match="worker-1 exited with 1, worker-2 exited with 3"):
        stack.follow_job(QueuedJobWatch(), {"id": "j", "status": "queued"})


def test_following_a_job_stops_when_the_coordinator_has_exited(stack):
    stack.coordinators.add("coordinator")
    stack.processes.update(coordinator=exited(2), **{"worker-1": running()})

    with pytest.raises(StackStopped, match="coordinator exited with 2"):
        stack.follow_job(QueuedJobWatch(), {"id": "j", "status": "running"})


def test_one_worker_gone_of_two_leaves_the_stack_running(stack):
    stack.coordinators.add("coordinator")
    stack.processes.update(coordinator=running(), **{"worker-a": exited(-9), "worker-b": running()})

    stack.check_running()  # the recovery run kills a worker on purpose
