"""A run ended by SIGTERM stops what it started, as one ended by Ctrl-C does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from devstack.stack import REPO, stop_on_sigterm

# A test whose fixture starts a process in a session of its own, as LocalStack and the
# embedded server do, and stops it on teardown; the test then waits to be interrupted.
HANGING_TEST = textwrap.dedent(
    """
    import os, signal, subprocess, time
    from pathlib import Path

    import pytest

    @pytest.fixture
    def child():
        process = subprocess.Popen(["sleep", "600"], start_new_session=True)
        Path(os.environ["CHILD_PID_FILE"]).write_text(str(process.pid))
        yield process
        os.killpg(process.pid, signal.SIGTERM)
        process.wait()

    def test_waits_to_be_interrupted(child):
        time.sleep(600)
    """
)


def alive(pid: int) -> bool:
    """Whether a process with this pid still exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_to_the_test_suite_tears_down_the_processes_its_fixtures_started(tmp_path):
    (tmp_path / "test_hanging.py").write_text(HANGING_TEST)
    pid_file = tmp_path / "child.pid"
    suite = subprocess.Popen(
        # Our conftest as a plugin, so the run has the suite's own hooks.
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_hanging.py"),
        ],
        cwd=REPO,
        env={**os.environ, "CHILD_PID_FILE": str(pid_file)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    child = None
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the hanging test never started its child"
            time.sleep(0.05)
        child = int(pid_file.read_text())
        time.sleep(0.2)  # into the test's sleep
        suite.send_signal(signal.SIGTERM)
        suite.wait(timeout=30)
        assert not alive(child)
    finally:
        suite.kill()
        suite.wait()
        if child is not None and alive(child):
            os.kill(child, signal.SIGKILL)


def test_stop_on_sigterm_turns_sigterm_into_keyboard_interrupt_once():
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        stop_on_sigterm()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        except KeyboardInterrupt:
            # A second signal during the clean-up the first one started is ignored.
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)
            return
        raise AssertionError("SIGTERM did not raise KeyboardInterrupt")
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
