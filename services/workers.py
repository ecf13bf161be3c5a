"""Workers' rows: forgetting the ones that went away."""

from __future__ import annotations

import logging

from repositories import workers as worker_rows
from services.runtime import Runtime

logger = logging.getLogger(__name__)

# The ids named in one log line; a flood of made-up ids is counted, not listed in full.
LOGGED_IDS = 20


def delete_idle_workers(rt: Runtime) -> int:
    """Delete workers unseen for CHUNKWISE_WORKER_RETENTION_SECONDS that hold no lease."""
    seconds = rt.limits.worker_retention_seconds
    with rt.pool.connection() as conn, conn.transaction():
        deleted = worker_rows.delete_idle_workers(conn, seconds)
    if deleted:
        logger.info(
            "idle workers forgotten",
            extra={
                "event": "workers_deleted",
                "workers": len(deleted),
                "worker_ids": deleted[:LOGGED_IDS],
                "idle_seconds": seconds,
            },
        )
    return len(deleted)
