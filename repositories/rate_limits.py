"""Rate-limited workloads' start tokens (sql/0025), read and spent within a claim's turn."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg import Connection


@dataclass(frozen=True)
class Bucket:
    """A workload's start tokens as of a moment."""

    tokens: float
    at: datetime


def bucket(conn: Connection, workload: str, rate: float, burst: float) -> Bucket:
    """The workload's tokens now: what its last claim left, refilled since up to the burst.

    A workload whose claims never started a task has no row: its bucket is full. Read by
    statement_timestamp(), so a claim that waited for its turn refilled for that wait too.
    """
    row = conn.execute(
        """
        SELECT statement_timestamp() AS at, LEAST(%(burst)s::float8, COALESCE(
            (SELECT b.tokens + %(rate)s::float8 * GREATEST(0, extract(
                 epoch FROM statement_timestamp() - b.refilled_at)::float8)
             FROM workload_buckets b WHERE b.workload = %(workload)s),
            %(burst)s::float8)) AS tokens
        """,
        {"workload": workload, "rate": rate, "burst": burst},
    ).fetchone()
    return Bucket(row["tokens"], row["at"])


def spend(conn: Connection, workload: str, bucket: Bucket, starts: int) -> None:
    """Take `starts` tokens from the bucket as read, leaving the rest as of its moment."""
    conn.execute(
        """
        INSERT INTO workload_buckets (workload, tokens, refilled_at)
        VALUES (%(workload)s, %(tokens)s, %(at)s)
        ON CONFLICT (workload) DO UPDATE
            SET tokens = EXCLUDED.tokens, refilled_at = EXCLUDED.refilled_at
        """,
        {"workload": workload, "tokens": bucket.tokens - starts, "at": bucket.at},
    )
