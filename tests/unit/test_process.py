"""A process's peak memory is its own, not the size of the process that started it."""

from __future__ import annotations

import subprocess
import sys

from services.process import peak_rss_bytes


def test_peak_rss_grows_with_what_this_process_holds():
    before = peak_rss_bytes()
    held = bytearray(64 * 1024 * 1024)
    held[::4096] = b"x" * len(held[::4096])  # touch every page
    assert peak_rss_bytes() >= before + 60 * 1024 * 1024


def test_a_child_started_by_a_large_process_reports_its_own_peak():
    held = bytearray(200 * 1024 * 1024)
    held[::4096] = b"x" * len(held[::4096])
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "from services.process import peak_rss_bytes; print(peak_rss_bytes())",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(child.stdout) < 150 * 1024 * 1024
