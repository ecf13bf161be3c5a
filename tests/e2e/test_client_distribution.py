"""chunkwise-client: the SDK installed into a fresh venv, without the server's dependencies."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


def run(venv: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess:
    # From an empty directory, so the checkout's packages are not on sys.path.
    return subprocess.run(
        [str(venv / "bin" / argv[0]), *argv[1:]], cwd=cwd, capture_output=True, text=True
    )


def test_the_client_distribution_imports_the_sdk_without_flask_or_psycopg(client_venv, tmp_path):
    sdk = run(client_venv, "python", "-c", "from worker_cli import Client, Worker", cwd=tmp_path)
    flask = run(client_venv, "python", "-c", "import flask", cwd=tmp_path)
    psycopg = run(client_venv, "python", "-c", "import psycopg", cwd=tmp_path)

    assert sdk.returncode == 0, sdk.stderr
    assert "No module named 'flask'" in flask.stderr
    assert "No module named 'psycopg'" in psycopg.stderr


def test_the_client_distribution_installs_both_commands(client_venv, tmp_path):
    worker = run(client_venv, "chunkwise-worker", "--help", cwd=tmp_path)
    cli = run(client_venv, "chunkwise", "--help", cwd=tmp_path)

    assert worker.returncode == 0 and "--app MODULE:ATTR" in worker.stdout
    assert cli.returncode == 0, cli.stderr
