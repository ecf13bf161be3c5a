"""The process's psycopg connection pool."""

from __future__ import annotations

from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from app.config import Settings


def open_pool(settings: Settings) -> ConnectionPool:
    """Open a pool whose every connection carries the statement and idle timeouts.

    Connections are in autocommit mode: a lone statement is its own transaction (one round
    trip rather than BEGIN, the statement and COMMIT), and a unit of several statements says
    so with `conn.transaction()`.
    """
    timeout = settings.db_statement_timeout_ms
    options = (
        f"-c statement_timeout={timeout} "
        f"-c idle_in_transaction_session_timeout={max(timeout * 2, 10_000)} "
        "-c timezone=UTC"
    )
    pool = ConnectionPool(
        settings.database_url,
        min_size=settings.db_pool_min,
        max_size=settings.db_pool_max,
        kwargs={"row_factory": dict_row, "options": options, "autocommit": True},
        timeout=5.0,
        open=False,
        name="chunkwise",
    )
    # Without waiting: the coordinator must start, and answer /readyz with 503, while the
    # database is still down.
    pool.open(wait=False)
    return pool
