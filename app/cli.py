"""Flask commands: seed local credentials, create users."""

from __future__ import annotations

import os

import click
from flask import Flask

from app.runtime import get_runtime
from services import auth


def init_app(app: Flask) -> None:
    """Register the commands."""

    @app.cli.command("seed-local")
    def seed_local() -> None:
        """Create compute_user, operator and a worker credential (idempotent)."""
        issued = auth.seed_local(
            get_runtime().pool,
            user_token=os.environ.get("CHUNKWISE_SEED_USER_TOKEN") or None,
            operator_token=os.environ.get("CHUNKWISE_SEED_OPERATOR_TOKEN") or None,
            worker_token=os.environ.get("CHUNKWISE_SEED_WORKER_TOKEN") or None,
        )
        for token in issued:
            state = "registered" if token.created else "already registered"
            click.echo(f"{token.kind:6} {token.name:14} {state:18} {token.token}")
        if not issued:
            click.echo("every local principal already has a token; nothing to do")

    @app.cli.command("create-user")
    @click.argument("name")
    @click.option("--role", type=click.Choice(["user", "operator"]), default="user")
    def create_user(name: str, role: str) -> None:
        """Create a user and print its new token."""
        click.echo(auth.create_user(get_runtime().pool, name, role).token)
