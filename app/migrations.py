"""Apply, roll back and list the yoyo migrations: an explicit step, never run on start."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from yoyo import get_backend, read_migrations

from app.config import MIGRATIONS_DIR, to_yoyo_url


def migration_ids(directory: Path = MIGRATIONS_DIR) -> list[str]:
    """Return the migration ids the code expects, in order."""
    return sorted(
        p.name[: -len(".sql")]
        for p in directory.glob("*.sql")
        if not p.name.endswith(".rollback.sql")
    )


def apply(database_url: str, directory: Path = MIGRATIONS_DIR) -> None:
    """Apply every pending migration."""
    backend = get_backend(to_yoyo_url(database_url))
    migrations = read_migrations(str(directory))
    with backend.lock():
        backend.apply_migrations(backend.to_apply(migrations))


def rollback_latest(database_url: str, directory: Path = MIGRATIONS_DIR) -> None:
    """Roll back the most recently applied migration."""
    backend = get_backend(to_yoyo_url(database_url))
    migrations = read_migrations(str(directory))
    with backend.lock():
        backend.rollback_migrations(backend.to_rollback(migrations)[:1])


def main(argv: list[str] | None = None) -> int:
    """`python -m app.migrations apply|rollback` against DATABASE_URL."""
    parser = argparse.ArgumentParser(prog="python -m app.migrations")
    parser.add_argument("action", choices=["apply", "rollback"])
    args = parser.parse_args(argv)
    url = os.environ.get("DATABASE_URL")
    if not url:
        print("DATABASE_URL is required (postgresql://user@host:port/dbname)", file=sys.stderr)
        return 2
    directory = Path(os.environ.get("CHUNKWISE_MIGRATIONS_DIR") or MIGRATIONS_DIR)
    # Exiting 0 with nothing applied would leave a server with no schema that thinks it has one.
    if not migration_ids(directory):
        print(
            f"no migrations found in {directory}: set CHUNKWISE_MIGRATIONS_DIR to the directory "
            "holding NNNN.name.sql",
            file=sys.stderr,
        )
        return 2
    (apply if args.action == "apply" else rollback_latest)(url, directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
