"""Flask commands: seed local credentials; create users; issue, list and revoke tokens."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import click
from flask import Flask

from app.runtime import get_runtime
from services import credentials
from services.archive import sync_to_disk
from services.errors import ChunkwiseError, InvalidInput

# seed-local's arguments, by the variable each is read from.
SEED_VARIABLES = {
    "user_token": "CHUNKWISE_SEED_USER_TOKEN",
    "operator_token": "CHUNKWISE_SEED_OPERATOR_TOKEN",
    "worker_token": "CHUNKWISE_SEED_WORKER_TOKEN",
}
# seed-local's argument (so its variable) for each principal it seeds.
SEEDED_BY = {
    "compute_user": "user_token",
    "operator": "operator_token",
    "local-worker": "worker_token",
}
# Where seed-local keeps the tokens it mints: the file make up writes and flask reads.
ENV_FILE = Path(".env")


def init_app(app: Flask) -> None:
    """Register the commands."""

    @app.cli.command("seed-local")
    def seed_local() -> None:
        """Create compute_user, operator and a worker credential (idempotent); print no token."""
        given = {arg: os.environ.get(name) or None for arg, name in SEED_VARIABLES.items()}
        try:
            issued = credentials.seed_local(get_runtime().pool, **given, keep=_keep_in_env_file)
        except InvalidInput as exc:
            raise click.ClickException(_named_by_variable(exc)) from exc
        minted = [t for t in issued if given[SEEDED_BY[t.name]] is None]
        # Never a token itself: this output ends up in logs (docker compose logs).
        for t in issued:
            state = "registered" if t.created else "already registered"
            where = f"written to {ENV_FILE}" if t in minted else "given"
            click.echo(f"{t.kind:6} {t.name:14} {state:18} {_variable(t)} ({where})")
        if not issued:
            click.echo("every local principal already has a token; nothing to do")

    @app.cli.command("create-user")
    @click.argument("name")
    @click.option("--role", type=click.Choice(["user", "operator"]), default="user")
    def create_user(name: str, role: str) -> None:
        """Create a user and print its new token."""
        with _refusal_as_error():
            click.echo(credentials.create_user(get_runtime().pool, name, role).token)

    @app.cli.command("issue-token")
    @click.argument("user")
    def issue_token(user: str) -> None:
        """Print a further token for an existing user (to rotate: issue, then revoke the old)."""
        with _refusal_as_error():
            click.echo(credentials.issue_token(get_runtime().pool, user).token)

    @app.cli.command("issue-worker-token")
    @click.argument("name")
    def issue_worker_token(name: str) -> None:
        """Print a new worker credential, named NAME in logs and the audit log."""
        with _refusal_as_error():
            click.echo(credentials.issue_worker_token(get_runtime().pool, name).token)

    @app.cli.command("list-tokens")
    @click.option("--all", "everything", is_flag=True, help="include revoked tokens")
    def list_tokens(everything: bool) -> None:
        """List tokens by id, kind and name (never the tokens themselves)."""
        click.echo(f"{'ID':>6}  {'KIND':6}  {'CREATED':20}  {'REVOKED':20}  NAME")
        for t in credentials.list_tokens(get_runtime().pool, revoked=everything):
            revoked = _when(t.revoked_at) if t.revoked_at else "-"
            click.echo(f"{t.id:>6}  {t.kind:6}  {_when(t.created_at):20}  {revoked:20}  {t.name}")

    @app.cli.command("revoke-token")
    @click.argument("token_id", metavar="ID", type=click.IntRange(min=1, max=2**63 - 1))
    def revoke_token(token_id: int) -> None:
        """Revoke a token by its id (see list-tokens); coordinators refuse it within moments."""
        with _refusal_as_error():
            t = credentials.revoke_token(get_runtime().pool, token_id)
        click.echo(f"token {t.id} ({t.kind} {t.name}) revoked at {_when(t.revoked_at)}")


@contextmanager
def _refusal_as_error() -> Iterator[None]:
    """A refusal is the command's error (one line, status 1), not a traceback."""
    try:
        yield
    except ChunkwiseError as exc:
        raise click.ClickException(str(exc)) from exc


def _keep_in_env_file(minted: list[credentials.IssuedToken]) -> None:
    """Append minted tokens to .env (created 0600) and sync them to disk; else the command fails."""
    # Run before the tokens are registered: a failure here registers none of them.
    created = not ENV_FILE.exists()
    try:
        fd = os.open(ENV_FILE, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            _append_tokens(fd, minted)
        finally:
            os.close(fd)
        if created:  # the file's name is on disk too, not only its bytes
            sync_to_disk(ENV_FILE.resolve().parent)
    except OSError as exc:
        raise click.ClickException(
            f"cannot keep new tokens in {ENV_FILE.resolve()} ({exc.strerror}): nothing registered;"
            f" set {', '.join(SEED_VARIABLES.values())} instead"
        ) from exc


def _append_tokens(fd: int, minted: list[credentials.IssuedToken]) -> None:
    """Write one line per token after the file's last line and sync it, or leave it as it was."""
    info = os.fstat(fd)
    # An older .env made readable to others would hand them the tokens: private from
    # now on. Only a file: through a link to a device, chmod would change the device.
    if stat.S_ISREG(info.st_mode):
        os.fchmod(fd, 0o600)
    # A last line without its newline would run into the first token's.
    unended = info.st_size and os.pread(fd, 1, info.st_size - 1) != b"\n"
    lines = "\n" * bool(unended) + "".join(f"{_variable(t)}={t.token}\n" for t in minted)
    try:
        data = memoryview(lines.encode())
        while data:
            data = data[os.write(fd, data) :]
        os.fsync(fd)
    except OSError:
        if stat.S_ISREG(info.st_mode):
            # No half-written line is left for a later run to read as a token.
            os.ftruncate(fd, info.st_size)
        raise


def _variable(token: credentials.IssuedToken) -> str:
    return SEED_VARIABLES[SEEDED_BY[token.name]]


def _named_by_variable(exc: InvalidInput) -> str:
    # The person fixes an environment variable, so the error names it, not the argument.
    lines = [
        f"{SEED_VARIABLES[field]} {problem}"
        for field, problems in exc.details["fields"].items()
        for problem in problems
    ]
    generate = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
    return (
        "refusing to seed:\n  "
        + "\n  ".join(lines)
        + f"\n(generate a secret with {generate} and put cwu_ or cww_ before it)"
    )


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
