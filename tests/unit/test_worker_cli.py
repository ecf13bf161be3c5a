"""The chunkwise-worker command: arguments, environment, worker ids, JSON logs, signals."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.unit.fakes import FakeClient, FakeClock, make_worker, task_payload, wait_until_idle
from worker_cli import worker
from worker_cli.handlers import ClaimedTask
from worker_cli.logs import configure_logging
from worker_cli.worker import keep_freed_memory, main
from worker_cli.worker_args import config_from_args, parse_args
from worker_cli.worker_config import default_worker_id

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def process_settings_kept_to_this_module(monkeypatch):
    """main() sizes polars' pool in the environment and tunes the allocator of its process:
    not for this test process and the tests after it."""
    monkeypatch.setenv("POLARS_MAX_THREADS", os.environ.get("POLARS_MAX_THREADS", "1"))
    monkeypatch.setattr(worker, "keep_freed_memory", lambda: None)


def test_default_worker_ids_are_readable_and_unique():
    ids = {default_worker_id() for _ in range(2000)}
    assert len(ids) == 2000
    host, pid, suffix = next(iter(ids)).rsplit("-", 2)
    assert host and pid == str(os.getpid()) and len(suffix) == 6


def test_a_worker_started_without_an_id_gets_its_hosts_and_pids_and_a_new_one_each_start():
    first, restarted = (config_from_args(parse_args([])).worker_id for _ in range(2))

    assert first.startswith(f"{socket.gethostname()}-{os.getpid()}-")
    # Not the dead process's id: its leases, until they expire, count against that id's cap.
    assert restarted != first


def test_missing_token_is_a_clear_error_with_status_2(monkeypatch, capsys):
    monkeypatch.delenv("CHUNKWISE_WORKER_TOKEN", raising=False)
    assert main(["--coordinator", "http://127.0.0.1:9"]) == 2
    assert "CHUNKWISE_WORKER_TOKEN" in capsys.readouterr().err


def test_missing_coordinator_is_an_error_with_status_2(monkeypatch, capsys):
    monkeypatch.setenv("CHUNKWISE_WORKER_TOKEN", "t")
    monkeypatch.delenv("CHUNKWISE_URL", raising=False)
    assert main([]) == 2
    assert "CHUNKWISE_URL" in capsys.readouterr().err


def test_unknown_workload_fails_at_start(monkeypatch, capsys):
    monkeypatch.setenv("CHUNKWISE_WORKER_TOKEN", "t")
    assert main(["--coordinator", "http://127.0.0.1:9", "--workloads", "no_such_thing"]) == 2
    assert "no_such_thing" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--fault", "explode"], ["--capacity", "x"]])
def test_bad_arguments_exit_2(monkeypatch, args):
    monkeypatch.setenv("CHUNKWISE_WORKER_TOKEN", "t")
    with pytest.raises(SystemExit) as exited:
        main(["--coordinator", "http://127.0.0.1:9", *args])
    assert exited.value.code == 2


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--capacity", "1001"], "capacity must be 1 to 1000"),
        (["--grace-seconds", "nan"], "grace_seconds"),
        (["--grace-seconds", "inf"], "grace_seconds"),
        (["--worker-id", "w" * 201], "worker_id"),
        (["--worker-id", "w\tw"], "worker_id"),
        (["--workloads", ",".join(f"w{n}" for n in range(21))], "1 to 20 workloads"),
        (["--coordinator", "http://[::1"], "is not a URL"),
        (["--coordinator", "http://127.0.0.1:port"], "is not a URL"),
    ],
)
def test_a_worker_the_coordinator_would_refuse_fails_at_start_with_status_2(
    monkeypatch, capsys, args, said
):
    monkeypatch.setenv("CHUNKWISE_WORKER_TOKEN", "t")

    assert main(["--coordinator", "http://127.0.0.1:9", *args]) == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize("token", ["t\nInjected: 1", "cwk_\u20ac", "two words"])
def test_a_token_no_authorization_header_can_carry_fails_at_start_with_status_2(
    monkeypatch, capsys, token
):
    monkeypatch.setenv("CHUNKWISE_WORKER_TOKEN", token)

    assert main(["--coordinator", "http://127.0.0.1:9"]) == 2
    assert "printable ASCII" in capsys.readouterr().err


def test_an_unknown_log_level_exits_2(monkeypatch):
    monkeypatch.setenv("CHUNKWISE_WORKER_TOKEN", "t")
    with pytest.raises(SystemExit) as exited:
        main(["--coordinator", "http://127.0.0.1:9", "--log-level", "foo"])
    assert exited.value.code == 2


def test_out_of_range_wait_seconds_exit_2(monkeypatch, capsys):
    monkeypatch.setenv("CHUNKWISE_WORKER_TOKEN", "t")
    assert main(["--coordinator", "http://127.0.0.1:9", "--wait-seconds", "31"]) == 2


@pytest.fixture
def json_log():
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    stream = io.StringIO()
    configure_logging(worker_id="w1", stream=stream)
    yield stream
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in saved[0]:
        root.addHandler(handler)
    root.setLevel(saved[1])


def test_log_lines_are_json_with_the_attempts_ids(json_log):
    clock = FakeClock()
    payload = task_payload("t1", attempt=2)
    client = FakeClient(clock, inputs={payload["input_uri"]: b"a,b\n1,2\n"})
    worker = make_worker(client, clock, capacity=1)

    worker.dispatch(ClaimedTask.from_payload(payload))
    assert wait_until_idle(worker)

    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    by_event = {line["event"]: line for line in lines}
    assert {"claimed", "computed", "submitted"} <= by_event.keys()
    for event in ("claimed", "computed", "submitted"):
        line = by_event[event]
        assert line["worker_id"] == "w1"
        assert line["trace_id"] == payload["trace_id"]
        assert (line["job_id"], line["task_id"], line["attempt_id"], line["attempt"]) == (
            "j1",
            "t1",
            "t1-a2",
            2,
        )
        assert line["level"] == "INFO" and "time" in line


# -- the real process ---------------------------------------------------------------------


class IdleCoordinator:
    """Answers every claim with 204, or with one task whose input never arrives."""

    def __init__(self, task: dict | None = None) -> None:
        self.task = task
        self.requests: list[dict] = []
        self.hang = threading.Event()
        coordinator = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                coordinator.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "json": body}
                )
                if self.path.endswith("/claim") and coordinator.task is not None:
                    task, coordinator.task = coordinator.task, None
                    self._json(200, {"tasks": [task], "trace_id": task["trace_id"]})
                elif self.path.endswith("/claim"):
                    self.send_response(204)
                    self.end_headers()
                else:
                    self._json(200, {"lease_expires_at": "2030-01-01T00:00:00Z"})

            def do_GET(self) -> None:
                coordinator.requests.append({"path": self.path, "headers": dict(self.headers)})
                coordinator.hang.wait(30)

            def _json(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()

    def close(self) -> None:
        self.hang.set()
        self.server.shutdown()
        self.server.server_close()


def start_worker(url: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "CHUNKWISE_WORKER_TOKEN": "s3cret", "CHUNKWISE_URL": url}
    return subprocess.Popen(
        [sys.executable, "-m", "worker_cli", "--wait-seconds", "0", *args],
        cwd=REPO,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_sigterm_on_an_idle_worker_exits_0():
    coordinator = IdleCoordinator()
    worker = start_worker(coordinator.url, "--worker-id", "idle-1")
    try:
        wait_for(lambda: len(coordinator.requests) >= 1)
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=10)
    finally:
        worker.kill()
        coordinator.close()

    assert worker.returncode == 0
    claim = coordinator.requests[0]
    assert claim["headers"]["Authorization"] == "Bearer s3cret"
    assert claim["headers"]["traceparent"].startswith("00-")
    assert claim["json"]["worker_id"] == "idle-1"
    events = [json.loads(line).get("event") for line in stderr.splitlines() if line.startswith("{")]
    assert "shutdown" in events


def test_second_sigterm_exits_at_once_while_a_chunk_is_in_flight():
    payload = task_payload("t1", workload="csv_stats")
    payload["parameters"] = {
        "column": "b",
        "column_index": 1,
        "delimiter": ",",
        "record_start": 0,
        "record_end": 1,
        "first_line": 2,
    }
    coordinator = IdleCoordinator(task=payload)
    worker = start_worker(coordinator.url, "--grace-seconds", "60")
    try:
        wait_for(
            lambda: any(
                r["path"].startswith("/api/v1/tasks/t1/input") for r in coordinator.requests
            )
        )
        worker.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert worker.poll() is None, "a warm stop waits for the chunk in flight"
        started = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=5)
    finally:
        worker.kill()
        coordinator.close()

    assert time.monotonic() - started < 2
    assert worker.returncode == 128 + signal.SIGTERM


class FakeLibc:
    """A C library whose mallopt records what it was asked."""

    def __init__(self):
        self.settings = []

    def mallopt(self, parameter, value):
        self.settings.append((parameter, value))
        return 1


def test_a_worker_keeps_freed_chunk_buffers_for_the_next_chunk(monkeypatch):
    libc = FakeLibc()
    monkeypatch.setattr(worker.ctypes, "CDLL", lambda name: libc)
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        monkeypatch.delenv(name, raising=False)
    keep_freed_memory()
    assert libc.settings == [
        (worker.M_MMAP_THRESHOLD, 32 << 20),
        (worker.M_TRIM_THRESHOLD, 64 << 20),
    ]


def test_the_environments_allocator_settings_win(monkeypatch):
    libc = FakeLibc()
    monkeypatch.setattr(worker.ctypes, "CDLL", lambda name: libc)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "0")
    keep_freed_memory()
    assert libc.settings == []


def test_a_c_library_without_mallopt_is_left_be(monkeypatch):
    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(worker.ctypes, "CDLL", missing)
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        monkeypatch.delenv(name, raising=False)
    keep_freed_memory()  # nothing to tune, and nothing raised
