"""make run's stack keeps its tokens private and across restarts; workers get only their own."""

from __future__ import annotations

import json
from pathlib import Path

from devstack.stack import LocalStack, Tokens, kept_tokens


def mode_of(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_tokens_are_kept_0600_in_a_0700_directory_and_reused(tmp_path):
    first = kept_tokens(tmp_path / "secrets")
    again = kept_tokens(tmp_path / "secrets")

    assert again == first
    assert mode_of(tmp_path / "secrets") == 0o700
    assert mode_of(tmp_path / "secrets" / "tokens.json") == 0o600
    assert json.loads((tmp_path / "secrets" / "tokens.json").read_text()) == vars(first)


def test_an_older_runs_secrets_directory_and_file_are_narrowed(tmp_path):
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir(mode=0o755)
    older = Tokens()
    (secrets_dir / "tokens.json").write_text(json.dumps(vars(older)))
    (secrets_dir / "tokens.json").chmod(0o644)

    assert kept_tokens(secrets_dir) == older
    assert mode_of(secrets_dir) == 0o700
    assert mode_of(secrets_dir / "tokens.json") == 0o600


def test_a_token_missing_from_an_older_file_is_added_and_the_rest_kept(tmp_path):
    older = Tokens()
    kept = {"user": older.user, "operator": older.operator, "worker": older.worker}
    (tmp_path / "tokens.json").write_text(json.dumps(kept))

    tokens = kept_tokens(tmp_path)

    assert (tokens.user, tokens.operator, tokens.worker) == (
        older.user,
        older.operator,
        older.worker,
    )
    assert len(tokens.metrics) >= 32
    assert kept_tokens(tmp_path) == tokens


def test_a_worker_is_given_its_own_token_and_neither_the_database_nor_other_tokens(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1/x")
    monkeypatch.setenv("PGPASSWORD", "secret")
    monkeypatch.setenv("CHUNKWISE_TOKEN", "cwu_" + "t" * 43)
    stack = LocalStack(
        database_url="postgresql://postgres@127.0.0.1/chunkwise",
        run_dir=tmp_path,
        env={"CHUNKWISE_SECRET_KEY": "k" * 40, "CHUNKWISE_LOG_LEVEL": "INFO"},
    )

    env = stack.worker_env()

    assert env["CHUNKWISE_WORKER_TOKEN"] == stack.tokens.worker
    assert env["CHUNKWISE_URL"] == stack.url
    assert env["CHUNKWISE_LOG_LEVEL"] == "INFO"
    leaked = [
        name
        for name, value in env.items()
        if "DATABASE_URL" in name
        or name.startswith("PG")
        or value in (stack.tokens.user, stack.tokens.operator, stack.tokens.metrics)
        or name in ("CHUNKWISE_TOKEN", "CHUNKWISE_SECRET_KEY")
    ]
    assert leaked == []
    assert "postgresql://" not in json.dumps(env)
