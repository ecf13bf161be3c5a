"""The peer bench reads a database server's CPU (it runs on this machine) and its WAL."""

from __future__ import annotations

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
        used = meter.read().since(before)
    finally:
        meter.close()

    assert used.database is not None and used.database >= 0.05
    assert used.machine >= used.database * 0.5


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
