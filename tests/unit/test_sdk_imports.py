"""The SDK lives beside a user's own `app`, `services` and `repositories` packages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SERVER_MODULES = ("app", "services", "repositories", "flask", "psycopg", "psycopg_pool")

TASKS = """
from services.pricing import double  # the project's own services package
from worker_cli import Worker

worker = Worker()


@worker.task("double")
def run_double(args, ctx):
    return {"result_uri": "s3://bucket/r", "result_sha256": "ab" * 32}
"""


@pytest.fixture
def project(tmp_path):
    """A project whose own top-level packages bear the server's names."""
    for package in ("app", "repositories"):
        (tmp_path / package).mkdir()
        # Loud if anything imports it: the SDK must not reach for the server's packages.
        (tmp_path / package / "__init__.py").write_text(f"raise SystemExit('{package} imported')")
    (tmp_path / "services").mkdir()
    (tmp_path / "services" / "__init__.py").write_text("")
    (tmp_path / "services" / "pricing.py").write_text("def double(x):\n    return 2 * x\n")
    (tmp_path / "tasks.py").write_text(textwrap.dedent(TASKS))
    return tmp_path


def run_in(project: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    # The project first on sys.path, as it is for a script run from the project's directory.
    path = os.pathsep.join([str(project), str(REPO)])
    return subprocess.run(
        [sys.executable, *args],
        cwd=project,
        env={**os.environ, "PYTHONPATH": path, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_importing_the_sdk_loads_none_of_the_server_s_packages(project):
    probe = (
        "import json, sys; from worker_cli import AsyncClient, Client, Worker; "
        "import worker_cli.chunkwise; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {SERVER_MODULES})))"
    )

    done = run_in(project, "-c", probe)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_chunkwise_worker_app_runs_in_a_project_with_its_own_services_package(project):
    with EmptyQueue() as coordinator:
        done = run_in(
            project,
            "-m",
            "worker_cli",
            "--app",
            "tasks:worker",
            "--burst",
            env={"CHUNKWISE_URL": coordinator.url, "CHUNKWISE_WORKER_TOKEN": "cw_worker"},
        )

    assert done.returncode == 0, done.stderr
    assert coordinator.claims == [["double"]]


class EmptyQueue:
    """A coordinator whose queue is empty: every claim is answered with no task."""

    def __init__(self) -> None:
        self.claims: list[list[str]] = []
        queue = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                queue.claims.append(json.loads(self.rfile.read(length))["workloads"])
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> EmptyQueue:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.shutdown()
        self.server.server_close()
