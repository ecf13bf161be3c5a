"""Procrastinate as a peer: its worker on a scratch database of the bench's PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psycopg

from bench.cpu import Meter
from bench.peers.figures import Drain, Row
from bench.peers.finished import wait_finished
from bench.peers.peer import Unavailable, require_listening, require_module, spawn, stop_process
from bench.queue import scratch_database

HELD = "peers_held"
RELEASE = """
WITH moved AS (
    UPDATE procrastinate_jobs SET queue_name = %(queue)s
    WHERE queue_name = %(held)s AND status = 'todo'
    RETURNING id
)
SELECT pg_notify('procrastinate_queue_v1#' || %(queue)s,
                 json_build_object('type', 'job_inserted', 'job_id', min(id))::text)
FROM moved
"""


class ProcrastinatePeer:
    """A Procrastinate worker (concurrency 4) on a database created here and dropped at stop."""

    def __init__(
        self, server_url: str, run_dir: Path, concurrency: int = 4, meter: Meter | None = None
    ):
        self.row = Row(f"Procrastinate, concurrency {concurrency}", concurrency, "yes, PostgreSQL")
        self.meter = meter or Meter()
        self.server_url = server_url
        self.concurrency = concurrency
        self.run_dir = run_dir
        self.done_file = run_dir / "procrastinate.done"
        self.database: scratch_database | None = None
        self.app = None
        self.worker: subprocess.Popen | None = None
        self.finished = 0

    def start(self) -> None:
        """Create the database and Procrastinate's schema, then start the worker."""
        require_module("procrastinate")
        require_listening(self.server_url, 5432)
        from procrastinate import App, SyncPsycopgConnector

        from bench.peers.procrastinate_tasks import QUEUE

        self.database = scratch_database(self.server_url)
        url = self.url = self.database.__enter__()
        # The bench defers by the task's name: the worker alone imports the task's module.
        self.queue = QUEUE
        self.app = App(connector=SyncPsycopgConnector(conninfo=url)).open()
        self.app.schema_manager.apply_schema()
        self.worker = spawn(
            [
                *(sys.executable, "-m", "procrastinate"),
                *("--app", "bench.peers.procrastinate_tasks.app", "worker"),
                *("--concurrency", str(self.concurrency), "--queues", QUEUE),
            ],
            {"PEERS_PROCRASTINATE_URL": url, "PEERS_DONE_FILE": str(self.done_file)},
            self.run_dir / "procrastinate.log",
        )

    def drain(self, turn: int, tasks: int, timeout: float) -> Drain:
        """Defer `tasks` no-op jobs in one batch; wait for the worker to have run them all."""
        if self.worker.poll() is not None:
            raise Unavailable(f"the Procrastinate worker exited; see {self.run_dir}")
        deadline = time.monotonic() + timeout
        submitting = time.time()
        # Deferred to a queue the worker does not listen to, then moved to its queue in one
        # statement with the notification a deferral sends: the worker starts on a full queue.
        held = self.app.configure_task("peers.noop", queue=HELD)
        held.batch_defer(*({} for _ in range(tasks)))
        used_before = self.meter.read()
        started = time.time()
        with psycopg.connect(self.url) as conn:
            conn.execute(RELEASE, {"held": HELD, "queue": self.queue})
        self.finished += tasks
        done = wait_finished(self.done_file, self.finished, deadline)
        used = self.meter.read().since(used_before)
        seconds = None if done is None else done - started
        return Drain(
            self.row.system, turn, tasks, seconds, submit_seconds=started - submitting, usage=used
        )

    def stop(self) -> None:
        """Stop the worker and drop its database."""
        stop_process(self.worker)
        if self.app is not None:
            self.app.close()
        if self.database is not None:
            self.database.__exit__(None, None, None)
