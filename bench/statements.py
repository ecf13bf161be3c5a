"""pg_stat_statements for a benchmark's scratch database: reset before a run, read after it.

bench.queue_profile and bench.job_statements print what they read; a server that does not
preload the library (the embedded one) counts nothing, and they say so.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg


def start_counting_statements(url: str) -> bool:
    """Reset pg_stat_statements for the run; False where the server does not preload it."""
    with psycopg.connect(url, autocommit=True) as conn:
        preloaded = conn.execute("SHOW shared_preload_libraries").fetchone()[0]
        if "pg_stat_statements" not in preloaded:
            return False
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT pg_stat_statements_reset()")
    return True


@dataclass(frozen=True)
class Statement:
    """What one statement cost the database during the run, in milliseconds."""

    text: str
    calls: int
    executing: float  # lock waits included
    planning: float  # 0 unless pg_stat_statements.track_planning is on


def counted_statements(url: str) -> list[Statement]:
    """The scratch database's statements since the reset, the costliest first."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            """
            SELECT query, calls, total_exec_time, total_plan_time
            FROM pg_stat_statements
            WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
            ORDER BY total_exec_time + total_plan_time DESC
            """
        ).fetchall()
    return [Statement(" ".join(text.split()), *figures) for text, *figures in rows]
