"""The Procrastinate app of the peer bench: one no-op task, loaded by its worker."""

from __future__ import annotations

import os

from procrastinate import App, PsycopgConnector

from bench.peers.finished import count_finished

QUEUE = "peers"

# What `procrastinate --app=bench.peers.procrastinate_tasks.app worker` loads; the pool opens
# only when the worker starts, on the database the bench passes by environment.
app = App(connector=PsycopgConnector(conninfo=os.environ.get("PEERS_PROCRASTINATE_URL", "")))


@app.task(name="peers.noop", queue=QUEUE)
def noop() -> None:
    """Do nothing but be counted."""
    count_finished()
