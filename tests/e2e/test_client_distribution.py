"""chunkwise-client: the SDK installed into a fresh venv, without the server's dependencies."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from devstack.observe import FAST

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory) -> Path:
    """A venv holding only chunkwise-client and what it depends on (fetched from PyPI)."""
    root = tmp_path_factory.mktemp("client")
    # Built from a copy, the symlinked package copied as files: the build leaves its
    # build/ and egg-info there, not in the checkout.
    source = root / "source"
    shutil.copytree(
        REPO / "clients" / "python", source, ignore=shutil.ignore_patterns("__pycache__")
    )
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", source],
        check=True,
        timeout=300,
    )
    return venv


def run(venv: Path, *argv: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    # From an empty directory and without PYTHONPATH, so no checkout is on sys.path.
    env = {k: v for k, v in {**os.environ, **(env or {})}.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [str(venv / "bin" / argv[0]), *argv[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_client_distribution_imports_the_sdk_without_flask_or_psycopg(client_venv, tmp_path):
    probe = "import worker_cli; from worker_cli import Client, Worker; print(worker_cli.__file__)"
    sdk = run(client_venv, "python", "-c", probe, cwd=tmp_path)
    flask = run(client_venv, "python", "-c", "import flask", cwd=tmp_path)
    psycopg = run(client_venv, "python", "-c", "import psycopg", cwd=tmp_path)

    assert sdk.returncode == 0, sdk.stderr
    assert sdk.stdout.startswith(str(client_venv))
    assert "No module named 'flask'" in flask.stderr
    assert "No module named 'psycopg'" in psycopg.stderr


def test_the_client_distribution_installs_both_commands(client_venv, tmp_path):
    worker = run(client_venv, "chunkwise-worker", "--help", cwd=tmp_path)
    cli = run(client_venv, "chunkwise", "--help", cwd=tmp_path)

    assert worker.returncode == 0 and "--app MODULE:ATTR" in worker.stdout
    assert cli.returncode == 0, cli.stderr


TEN_LINES = """
from worker_cli import Client, Worker

worker = Worker()

@worker.task("square")
def square(args, ctx):
    return args["x"] ** 2

client = Client()
job = client.submit("square", [{"x": i} for i in range(500)], labels={"run": "demo"})
worker.run(burst=True)
client.wait(job["id"], timeout=60)
assert client.results(job["id"]) == [i * i for i in range(500)]
print("ten lines ok")
"""


@pytest.fixture
def stack_env() -> dict:
    return {**FAST, "CHUNKWISE_ALLOWED_WORKLOADS": "square"}


def test_the_ten_line_example_runs_from_the_client_distribution(client_venv, stack, tmp_path):
    (tmp_path / "ten_lines.py").write_text(TEN_LINES)
    settings = {
        "CHUNKWISE_URL": stack.url,
        "CHUNKWISE_TOKEN": stack.tokens.user,
        "CHUNKWISE_WORKER_TOKEN": stack.tokens.worker,
    }

    done = run(client_venv, "python", "ten_lines.py", cwd=tmp_path, env=settings)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ten lines ok"
