"""Planner statistics kept up with a queue that grows faster than autovacuum looks at it.

PostgreSQL plans by table statistics that autovacuum refreshes at most once a minute
(autovacuum_naptime). A tasks table that grows from nothing to thousands of rows in a second
is planned as a handful of rows until then, and so is task_attempts, which grows by a row a
lease: the claim's kept plan scanned the tasks table whole for every task it leased, and the
completion scanned every attempt (docs/performance/profile.md, "Statistics of a table that
grew"). New statistics also make PostgreSQL replan the statements prepared on them.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import psycopg
from psycopg import Connection

from repositories import statistics as stat_rows
from repositories.statistics import TableSize
from services.runtime import Runtime

logger = logging.getLogger(__name__)

# Below this many rows any plan is quick; at it and past it, a table is analysed once it holds
# at least twice the rows it did when last analysed.
MIN_ROWS = 1000
# Autovacuum may be at the table: then it is left to it rather than waited for.
LOCK_TIMEOUT = "100ms"


def outgrown(size: TableSize) -> bool:
    """Whether a table this role may analyse has at least doubled (and holds MIN_ROWS) since it
    was last analysed. A role that does not own the tables leaves them to autovacuum."""
    return size.analysable and size.live >= MIN_ROWS and size.live >= 2 * max(size.planned, 0)


def refresh_outgrown(rt: Runtime) -> list[str]:
    """Analyse each growing table that has outgrown its statistics (a maintenance step)."""
    with rt.pool.connection() as conn:
        return [s.table for s in stat_rows.sizes(conn) if outgrown(s) and _analyze(conn, s)]


def refresh_after_admission(conn: Connection, added: int) -> None:
    """Analyse the tasks table at once when a job alone holds as many tasks as the table did
    when last analysed: its claims start now, before the collector has even counted them.

    The job is in by now: a failure here is logged, never raised, so its submission still
    answers 201 (the maintenance pass tries again)."""
    if added < MIN_ROWS:
        return
    try:
        (tasks,) = [s for s in stat_rows.sizes(conn) if s.table == "tasks"]
        if tasks.analysable and added >= tasks.planned:
            _analyze(conn, replace(tasks, live=tasks.live + added))
    except psycopg.Error as exc:
        logger.warning(
            "could not analyse the tasks table after an admission",
            extra={"event": "analyse_error", "error": str(exc)[:500]},
        )


def _analyze(conn: Connection, size: TableSize) -> bool:
    if not stat_rows.analyze(conn, size.table, LOCK_TIMEOUT):
        return False
    logger.info(
        "table analysed",
        extra={"event": "table_analysed", "table": size.table, "rows": size.live},
    )
    return True
