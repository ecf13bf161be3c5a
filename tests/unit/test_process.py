"""A process's peak memory is its own, not the size of the process that started it."""

from __future__ import annotations

import subprocess
import sys


def test_peak_rss_grows_with_what_the_process_holds():
    # In a fresh process: this one's high-water mark may already be above anything added now.
    script = (
        "from worker_cli.process import peak_rss_bytes\n"
        "before = peak_rss_bytes()\n"
        "held = bytearray(64 * 1024 * 1024)\n"
        "held[::4096] = b'x' * len(held[::4096])\n"
        "print(before, peak_rss_bytes())\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    before, after = map(int, run.stdout.split())
    assert after >= before + 60 * 1024 * 1024


def test_a_child_started_by_a_large_process_reports_its_own_peak():
    held = bytearray(200 * 1024 * 1024)
    held[::4096] = b"x" * len(held[::4096])
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "from worker_cli.process import peak_rss_bytes; print(peak_rss_bytes())",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(child.stdout) < 150 * 1024 * 1024
