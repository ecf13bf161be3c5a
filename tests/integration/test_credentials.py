"""Operators' credential commands: create users, issue, list and revoke tokens."""

from __future__ import annotations

import pytest

from services import auth


def flask(app, *args: str):
    """Run `flask --app app <args>` in process and return click's result."""
    return app.test_cli_runner().invoke(args=list(args))


def bearer(token: str) -> dict:
    """An Authorization header for a token."""
    return {"Authorization": f"Bearer {token}"}


def listed(app, *flags: str) -> dict[int, list[str]]:
    """list-tokens' rows by id: kind, created, revoked, name (dates as two words each)."""
    result = flask(app, "list-tokens", *flags)
    assert result.exit_code == 0, result.output
    header, *rows = result.output.splitlines()
    assert header.split() == ["ID", "KIND", "CREATED", "REVOKED", "NAME"]
    return {int(row.split()[0]): row.split()[1:] for row in rows}


def test_issue_token_gives_a_user_a_further_token_beside_the_first(app, client, tokens):
    issued = flask(app, "issue-token", "compute_user")

    token = issued.output.strip()
    assert issued.exit_code == 0 and token.startswith(auth.USER_PREFIX)
    assert token != tokens["user"]
    for each in (token, tokens["user"]):
        assert client.get("/api/v1/jobs", headers=bearer(each)).status_code == 200


def test_issue_token_for_no_such_user_exits_1_naming_it_and_writes_nothing(app, tokens, db):
    before = db.execute("SELECT count(*) AS n FROM api_tokens").fetchone()["n"]

    refused = flask(app, "issue-token", "nobody")

    assert refused.exit_code == 1
    assert "no user is named 'nobody'" in refused.output
    assert db.execute("SELECT count(*) AS n FROM api_tokens").fetchone()["n"] == before


def test_issue_worker_token_gives_a_credential_that_may_claim_and_nothing_else(app, client):
    issued = flask(app, "issue-worker-token", "fleet-a")

    token = issued.output.strip()
    assert issued.exit_code == 0 and token.startswith(auth.WORKER_PREFIX)
    claim = {"worker_id": "w1", "workloads": ["echo"]}
    assert client.post("/api/v1/tasks/claim", json=claim, headers=bearer(token)).status_code == 204
    assert client.get("/api/v1/jobs", headers=bearer(token)).status_code == 403


def test_list_tokens_shows_each_live_token_by_id_kind_and_name_and_never_the_secret(
    app, tokens, db
):
    rows = listed(app)

    names = {(row[0], row[-1]) for row in rows.values()}
    assert names >= {("user", "compute_user"), ("user", "operator"), ("worker", "local-worker")}
    output = flask(app, "list-tokens").output
    for token in tokens.values():
        assert token not in output and auth.token_digest(token) not in output


def test_revoke_token_is_refused_by_the_api_as_soon_as_it_is_heard(
    app, client, headers, tokens, db, eventually
):
    # Remembered by the coordinator now (CHUNKWISE_AUTH_CACHE_SECONDS, 30 s by default).
    assert client.get("/api/v1/jobs", headers=headers["user"]).status_code == 200
    token_id = db.execute(
        "SELECT id FROM api_tokens WHERE token_sha256 = %s", [auth.token_digest(tokens["user"])]
    ).fetchone()["id"]

    revoked = flask(app, "revoke-token", str(token_id))

    assert revoked.exit_code == 0, revoked.output
    assert f"token {token_id} (user compute_user) revoked at " in revoked.output
    assert eventually(
        2.0, lambda: client.get("/api/v1/jobs", headers=headers["user"]).status_code == 401
    )
    assert token_id not in listed(app)
    assert listed(app, "--all")[token_id][3] != "-"


def test_revoking_a_token_twice_keeps_its_first_revocation_time(app, tokens, db):
    token_id = db.execute(
        "SELECT id FROM api_tokens WHERE kind = 'worker' ORDER BY id LIMIT 1"
    ).fetchone()["id"]

    first = flask(app, "revoke-token", str(token_id)).output
    second = flask(app, "revoke-token", str(token_id)).output

    assert f"token {token_id} (worker local-worker) revoked at " in first
    assert first == second


def test_revoke_token_with_an_id_no_token_has_exits_1_naming_it(app, tokens):
    refused = flask(app, "revoke-token", "999999")

    assert (refused.exit_code, refused.output) == (1, "Error: no token has the id 999999\n")


@pytest.mark.parametrize("token_id", ["0", "-1", "seven", "9223372036854775808"])
def test_revoke_token_with_an_id_no_token_can_have_is_a_usage_error(app, token_id):
    refused = flask(app, "revoke-token", token_id)

    assert refused.exit_code == 2
    assert refused.output.startswith("Usage: app revoke-token [OPTIONS] ID")
    assert "Traceback" not in refused.output


def credentials(db) -> int:
    """How many users and tokens there are."""
    return db.execute(
        "SELECT (SELECT count(*) FROM users) + (SELECT count(*) FROM api_tokens) AS n"
    ).fetchone()["n"]


@pytest.mark.parametrize(
    ("command", "name"),
    [
        ("create-user", ""),
        ("create-user", "   "),
        ("create-user", "a\x00b"),
        ("create-user", "tab\there"),
        ("create-user", "n" * 201),
        ("issue-worker-token", ""),
        ("issue-worker-token", "a\x00b"),
        ("issue-worker-token", "\ud800"),
    ],
)
def test_a_name_no_log_line_can_carry_is_refused_naming_the_field_and_writes_nothing(
    app, db, command, name
):
    before = credentials(db)

    refused = flask(app, command, name)

    assert refused.exit_code == 1, refused.output
    assert "Error: name: must be 1-200 printable characters" in refused.output
    assert credentials(db) == before


def test_every_credential_change_is_in_the_audit_log_without_the_token(app, db):
    user_token = flask(app, "create-user", "alice").output.strip()
    second = flask(app, "issue-token", "alice").output.strip()
    worker = flask(app, "issue-worker-token", "fleet-b").output.strip()
    worker_id = max(listed(app))
    flask(app, "revoke-token", str(worker_id))

    rows = db.execute(
        "SELECT actor, action, target, details FROM audit_log"
        " WHERE action LIKE 'user.%%' OR action LIKE 'token.%%' ORDER BY id"
    ).fetchall()

    assert [(r["actor"], r["action"]) for r in rows] == [("command line", "user.create")] + [
        ("command line", "token.issue")
    ] * 3 + [("command line", "token.revoke")]
    assert rows[0]["target"] == "user alice" and rows[0]["details"] == {"role": "user"}
    assert rows[-1]["target"] == f"token {worker_id}"
    assert rows[-2]["details"] == {"kind": "worker", "name": "fleet-b"}
    logged = str(rows)
    for token in (user_token, second, worker):
        assert token not in logged and auth.token_digest(token) not in logged
