"""The peer bench finds the database server's processes when the server runs on this machine."""

from __future__ import annotations

from pathlib import Path

import psycopg

from bench.cpu import Meter, postmaster_of


def test_the_server_found_is_the_parent_of_a_backend_and_its_cpu_grows_with_a_query(
    database_url,
):
    postmaster = postmaster_of(database_url)
    assert postmaster is not None
    assert Path(f"/proc/{postmaster}/cmdline").read_bytes().split(b"\0")[0].endswith(b"postgres")
    meter = Meter(postmaster)
    before = meter.read()
    with psycopg.connect(database_url) as conn:
        backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        assert str(backend) in Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text()
        conn.execute("SELECT count(*) FROM generate_series(1, 3000000)").fetchone()

    used = meter.read().since(before)
    assert used.database is not None and used.database >= 0.05
    assert used.machine >= used.database * 0.5
