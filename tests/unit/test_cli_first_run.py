"""What a newcomer meets first: --version, a resubmitted job said out loud, --new, and one-line
errors when the environment is incomplete."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from importlib import metadata

import pytest

from app.config import REPO_ROOT
from worker_cli import version
from worker_cli import worker as worker_command
from worker_cli.chunkwise import run
from worker_cli.client import SubmittedJob
from worker_cli.commands.idempotency_keys import KEY_PREFIX
from worker_cli.commands.invocation import EXIT_OK, EXIT_USAGE

ENV = {"CHUNKWISE_URL": "http://c.test", "CHUNKWISE_TOKEN": "cwu_t"}
JOB_ID = "6e56eaf5-06ec-450f-a4f0-f652955b2d63"


class ReplayingClient:
    """Answers every submit as the coordinator does for a key it has seen: the earlier job."""

    created = False
    keys: list[str] = []

    def __init__(self, url, token):
        pass

    def _answer(self, idempotency_key: str) -> SubmittedJob:
        ReplayingClient.keys.append(idempotency_key)
        return SubmittedJob({"id": JOB_ID, "status": "failed"}, created=ReplayingClient.created)

    def submit_csv_job(self, file, *, idempotency_key, trace_id, **kwargs):
        return self._answer(idempotency_key)

    def submit_job(self, job, *, idempotency_key, trace_id):
        return self._answer(idempotency_key)

    def close(self):
        pass


@pytest.fixture
def replaying():
    ReplayingClient.created, ReplayingClient.keys = False, []
    return ReplayingClient


def chunkwise(argv, environ=ENV) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = run(argv, client_factory=ReplayingClient, out=out, err=err, environ=environ)
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def csv_file(tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes(b"id,value\n1,5\n")
    return str(path)


@pytest.fixture
def job_file(tmp_path):
    path = tmp_path / "job.json"
    path.write_text('{"workload": "echo", "tasks": []}')
    return str(path)


def test_submit_says_on_one_stderr_line_when_it_returns_an_earlier_job(replaying, csv_file):
    status, out, err = chunkwise(["submit", csv_file, "--column", "value"])

    assert (status, out) == (EXIT_OK, f"{JOB_ID}\n")
    assert err.count("\n") == 1
    assert f"job {JOB_ID} was submitted before" in err
    assert "it is failed" in err and "--new" in err


def test_enqueue_says_when_it_returns_an_earlier_job(replaying, job_file):
    _, _, err = chunkwise(["enqueue", job_file])

    assert f"job {JOB_ID} was submitted before" in err


def test_a_job_created_now_is_printed_without_a_note(replaying, csv_file):
    replaying.created = True

    status, _, err = chunkwise(["submit", csv_file, "--column", "value"])

    assert (status, err) == (EXIT_OK, "")


@pytest.mark.parametrize("command", ["submit", "enqueue"])
def test_new_submits_under_a_fresh_key_each_time(replaying, csv_file, job_file, command):
    argv = (
        ["submit", csv_file, "--column", "value"] if command == "submit" else ["enqueue", job_file]
    )

    chunkwise([*argv, "--new"])
    chunkwise([*argv, "--new"])
    chunkwise(argv)

    fresh, again, derived = replaying.keys
    assert fresh != again
    assert not fresh.startswith(KEY_PREFIX) and derived.startswith(KEY_PREFIX)


def test_new_and_an_explicit_key_together_are_a_usage_error(replaying, csv_file):
    status, _, err = chunkwise(
        ["submit", csv_file, "--column", "v", "--new", "--idempotency-key", "k"]
    )

    assert status == EXIT_USAGE
    assert "not allowed with" in err
    assert replaying.keys == []


def test_chunkwise_version_prints_the_installed_version(capsys):
    status = run(["--version"], environ={})

    assert status == EXIT_OK
    assert capsys.readouterr().out == f"chunkwise {version.installed_version()}\n"


def test_chunkwise_worker_version_prints_the_installed_version(capsys):
    with pytest.raises(SystemExit) as exited:
        worker_command.main(["--version"])

    assert exited.value.code == 0
    assert capsys.readouterr().out == f"chunkwise-worker {version.installed_version()}\n"


def test_the_version_comes_from_the_installed_distribution():
    assert version.installed_version() == metadata.version("chunkwise")


def test_the_version_says_so_when_nothing_is_installed(monkeypatch):
    monkeypatch.setattr(version, "DISTRIBUTIONS", ("no-such-distribution-of-chunkwise",))

    assert version.installed_version() == version.NOT_INSTALLED


def test_chunkwise_without_url_and_token_names_both_on_one_line():
    status, _, err = chunkwise(["jobs"], environ={})

    assert status == EXIT_USAGE
    assert err == "chunkwise: give --url or CHUNKWISE_URL and --token or CHUNKWISE_TOKEN\n"


def test_chunkwise_worker_without_its_token_names_it_on_one_line(monkeypatch, capsys):
    monkeypatch.delenv("CHUNKWISE_WORKER_TOKEN", raising=False)

    status = worker_command.main(["--coordinator", "http://c.test"])

    err = capsys.readouterr().err
    assert status == EXIT_USAGE
    assert err == "chunkwise-worker: CHUNKWISE_WORKER_TOKEN is not set\n"


def test_flask_commands_without_database_url_fail_on_one_line_naming_it(tmp_path):
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "CHUNKWISE_"))
    }
    environ["PYTHONPATH"] = str(REPO_ROOT)

    done = subprocess.run(
        [sys.executable, "-m", "flask", "--app", "app", "list-tokens"],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )

    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1
    assert "DATABASE_URL is required" in done.stderr


def test_gunicorn_without_database_url_fails_on_one_line_naming_it(tmp_path):
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "CHUNKWISE_"))
    }
    environ |= {"PYTHONPATH": str(REPO_ROOT), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}

    done = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", str(REPO_ROOT / "gunicorn.conf.py")],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )

    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    # gunicorn's own "Starting gunicorn" log line comes first.
    assert done.stderr.splitlines()[-1] == (
        "chunkwise: invalid configuration: DATABASE_URL is required "
        "(postgresql://user@host:port/dbname)"
    )
