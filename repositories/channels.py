"""The NOTIFY channels triggers announce changes on, and subscribing to them."""

from __future__ import annotations

from psycopg import Connection, sql

# A task may have become claimable: it became pending (sql/0004.claimable_changes.sql for new
# jobs, sql/0006.statement_announcements.sql for changes of status), or a lease under a lease
# cap ended (sql/0032.freed_leases_under_caps.sql).
CLAIMABLE = "chunkwise_claimable"
# A job's view changed; the payload is its id: sql/0003.job_changes.sql for the job row,
# sql/0006.statement_announcements.sql for its tasks.
JOB_CHANGED = "chunkwise_job_changed"
# A token or a user changed, so a principal a coordinator remembers may be wrong now:
# sql/0009.credential_changes.sql.
CREDENTIALS_CHANGED = "chunkwise_credentials_changed"
# An operator added, changed or removed a workload, or a coordinator seeded one:
# sql/0031.workloads.sql.
WORKLOADS_CHANGED = "chunkwise_workloads_changed"


def listen(conn: Connection) -> None:
    """Subscribe an autocommit connection to every channel."""
    for channel in (CLAIMABLE, JOB_CHANGED, CREDENTIALS_CHANGED, WORKLOADS_CHANGED):
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
