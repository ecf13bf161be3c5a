"""bench.queue_profile counts the database's statements where the server preloads
pg_stat_statements, and says it cannot where it does not."""

from __future__ import annotations

import psycopg

from bench.statements import counted_statements, start_counting_statements


def test_statements_are_counted_from_the_reset_exactly_where_the_server_preloads_them(
    empty_database_url,
):
    with psycopg.connect(empty_database_url, autocommit=True) as conn:
        libraries = conn.execute("SHOW shared_preload_libraries").fetchone()[0]
    preloaded = "pg_stat_statements" in libraries

    counting = start_counting_statements(empty_database_url)

    assert counting == preloaded
    if counting:
        with psycopg.connect(empty_database_url, autocommit=True) as conn:
            for _ in range(3):
                conn.execute("SELECT pg_backend_pid()")
        counted = {s.text: s for s in counted_statements(empty_database_url)}
        assert counted["SELECT pg_backend_pid()"].calls == 3
