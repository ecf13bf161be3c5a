"""The peer bench reads a database server's CPU (it runs on this machine) and its WAL."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg

from bench.cpu import Meter


def test_the_server_found_is_the_parent_of_a_backend_and_its_cpu_grows_with_a_query(
    database_url,
):
    meter = Meter(database_url)
    try:
        postmaster = meter.postmaster
        assert postmaster is not None
        command = Path(f"/proc/{postmaster}/cmdline").read_bytes().split(b"\0")[0]
        assert command.endswith(b"postgres")
        before = meter.read()
        with psycopg.connect(database_url) as conn:
            backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            children = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text()
            assert str(backend) in children.split()
            conn.execute("SELECT count(*) FROM generate_series(1, 3000000)").fetchone()
            running = meter.read().since(before)
        reaped(backend)
        ended = meter.read().since(before)
    finally:
        meter.close()

    assert running.database is not None and running.database >= 0.05
    assert running.machine >= running.database * 0.5
    # A backend that ended still counts once the postmaster has reaped it. Its time then comes
    # from the parent's children's ticks, each of user and system time cut down to a whole
    # tick, rather than from its own clock.
    ticks_lost = 2 / os.sysconf("SC_CLK_TCK")
    assert ended.database is not None and ended.database >= running.database - ticks_lost


def reaped(pid: int, timeout: float = 10.0) -> None:
    """Wait until a process has ended and its parent has reaped it."""
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists():
        assert time.monotonic() < deadline, f"process {pid} still there after {timeout} s"
        time.sleep(0.01)


def test_the_wal_a_write_adds_is_read_and_reading_adds_next_to_none(database_url):
    meter = Meter(database_url)
    try:
        first = meter.read()
        quiet = meter.read().since(first)
        with psycopg.connect(database_url) as conn:
            conn.execute("CREATE TABLE walled AS SELECT g FROM generate_series(1, 10000) AS g")
        written = meter.read().since(first)
    finally:
        meter.close()

    assert quiet.wal < 8192  # the server's own background work may write a little
    assert written.wal > 100_000
