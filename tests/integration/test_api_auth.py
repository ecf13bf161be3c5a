"""Who may call what: bearer tokens, worker versus user routes, owners, operators, seeding."""

from __future__ import annotations

import errno
import os
import stat
import uuid

import pytest

from app import cli
from services import auth, credentials
from tests.integration.csv_worker import settings
from tests.integration.manifests import WORKER, manifest

MISSING_JOB = "6f1c1a1e-0000-4000-8000-000000000000"
LEASE = {"lease_token": "cwl_" + "0" * 64}
TASK_ROUTES = [
    ("/api/v1/tasks/claim", {"worker_id": WORKER, "workloads": ["echo"]}),
    (f"/api/v1/tasks/{MISSING_JOB}/heartbeat", {"worker_id": WORKER, "attempt": 1, **LEASE}),
    (f"/api/v1/tasks/{MISSING_JOB}/result", {"worker_id": WORKER, "attempt": 1, **LEASE}),
    (
        f"/api/v1/tasks/{MISSING_JOB}/failure",
        {"worker_id": WORKER, "attempt": 1, **LEASE, "error_code": "x", "retryable": False},
    ),
]
# Every route that names one job; {id} is filled in.
JOB_ROUTES = [
    ("GET", "/api/v1/jobs/{id}"),
    ("GET", "/api/v1/jobs/{id}/results"),
    ("GET", "/api/v1/jobs/{id}/chunks"),
    ("POST", "/api/v1/jobs/{id}/cancel"),
    ("POST", "/api/v1/jobs/{id}/retry"),
]


# --- authentication ---------------------------------------------------------------------------


def test_a_request_without_a_valid_token_is_401(client, tokens):
    for authorization in [
        None,
        "Bearer ",
        "Bearer not-a-chunkwise-token",
        "Bearer cwu_" + "x" * 43,  # well formed, never issued
        "Bearer cww_" + "x" * 43,
        f"Basic {tokens['user']}",
        tokens["user"],  # no scheme at all
    ]:
        given = {"Authorization": authorization} if authorization else {}

        response = client.get("/api/v1/events", headers=given)

        assert response.status_code == 401, authorization
        assert response.get_json()["error"]["code"] == "unauthenticated", authorization


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer"])
def test_the_bearer_scheme_is_case_insensitive(scheme, client, tokens):
    response = client.get("/api/v1/events", headers={"Authorization": f"{scheme} {tokens['user']}"})

    assert response.status_code == 200


def test_a_revoked_token_is_401_as_soon_as_the_coordinator_hears_of_it(
    client, headers, tokens, db, eventually
):
    # Remembered by the coordinator now (CHUNKWISE_AUTH_CACHE_SECONDS, 30 s by default).
    assert client.get("/api/v1/events", headers=headers["user"]).status_code == 200
    db.execute(
        "UPDATE api_tokens SET revoked_at = now() WHERE token_sha256 = %s",
        (auth.token_digest(tokens["user"]),),
    )

    def events():
        return client.get("/api/v1/events", headers=headers["user"])

    # Within the listener's hearing, not the 30 s the token could otherwise be remembered.
    assert eventually(2.0, lambda: events().status_code == 401)
    assert events().status_code == 401


def test_an_operator_demoted_to_user_loses_the_operator_views_as_soon_as_it_is_heard(
    client, headers, db, eventually
):
    assert client.get("/api/v1/queue", headers=headers["operator"]).status_code == 200
    db.execute("UPDATE users SET role = 'user' WHERE name = 'operator'")

    def queue():
        return client.get("/api/v1/queue", headers=headers["operator"])

    assert eventually(2.0, lambda: queue().status_code == 403)


def listener_pids(db) -> list[int]:
    """The backends of this database's LISTENing connections (the coordinator's listener)."""
    rows = db.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND query LIKE 'LISTEN%%' AND pid <> pg_backend_pid()"
    ).fetchall()
    return [r["pid"] for r in rows]


def test_a_coordinator_forgets_every_token_when_its_listener_reconnects(
    client, headers, rt, db, eventually
):
    assert client.get("/api/v1/events", headers=headers["user"]).status_code == 200
    # The listener is connected, and forgot everything once then (there was nothing yet).
    assert eventually(5.0, lambda: bool(listener_pids(db)) and rt.principals.generation() >= 1)
    before = rt.principals.generation()

    # Cut off, the listener may miss a revocation: once back, it must not trust its memory.
    for pid in listener_pids(db):
        db.execute("SELECT pg_terminate_backend(%s)", (pid,))

    assert eventually(5.0, lambda: rt.principals.generation() > before)


@settings(CHUNKWISE_AUTH_CACHE_SECONDS="0")
def test_with_the_auth_cache_off_a_revoked_token_is_401_on_the_very_next_request(
    client, headers, tokens, db
):
    assert client.get("/api/v1/events", headers=headers["user"]).status_code == 200
    db.execute(
        "UPDATE api_tokens SET revoked_at = now() WHERE token_sha256 = %s",
        (auth.token_digest(tokens["user"]),),
    )

    assert client.get("/api/v1/events", headers=headers["user"]).status_code == 401


def test_job_creation_without_a_token_is_401_and_stores_nothing(client, db):
    response = client.post("/api/v1/jobs", json=manifest(1))

    assert response.status_code == 401
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


# --- worker routes and user routes ------------------------------------------------------------


def test_a_user_token_is_403_on_the_task_routes(client, headers):
    for path, body in TASK_ROUTES:
        for who in ("user", "operator"):
            response = client.post(path, json=body, headers=headers[who])

            assert response.status_code == 403, (who, path)
            assert response.get_json()["error"]["code"] == "forbidden", (who, path)


def test_a_worker_token_is_403_on_the_job_routes(client, headers, db):
    for method, path in [
        ("GET", "/api/v1/jobs"),
        ("POST", "/api/v1/jobs"),
        *[(m, r.format(id=MISSING_JOB)) for m, r in JOB_ROUTES],
        ("GET", "/api/v1/events"),
    ]:
        response = client.open(path, method=method, json=manifest(1), headers=headers["worker"])

        assert response.status_code == 403, (method, path)
        assert response.get_json()["error"]["code"] == "forbidden", (method, path)
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def test_a_worker_token_may_read_the_openapi_document(client, headers):
    assert client.get("/api/v1/openapi.json", headers=headers["worker"]).status_code == 200


# --- ownership --------------------------------------------------------------------------------


def test_another_users_job_is_404_exactly_like_a_missing_one_on_every_job_route(
    submit, client, headers
):
    theirs = submit(manifest(1), as_="other")

    for method, route in JOB_ROUTES:
        hidden = client.open(route.format(id=theirs["id"]), method=method, headers=headers["user"])
        missing = client.open(route.format(id=MISSING_JOB), method=method, headers=headers["user"])

        assert hidden.status_code == missing.status_code == 404, route
        hidden_error, missing_error = hidden.get_json()["error"], missing.get_json()["error"]
        assert hidden_error["code"] == missing_error["code"] == "not_found", route
        assert hidden_error["message"].replace(theirs["id"], "ID") == missing_error[
            "message"
        ].replace(MISSING_JOB, "ID"), route
        assert hidden_error["details"] == missing_error["details"], route
        assert set(hidden.headers.keys()) == set(missing.headers.keys()), route
    # Neither the cancel nor the retry touched it.
    status = client.get(f"/api/v1/jobs/{theirs['id']}", headers=headers["other"]).get_json()
    assert (status["status"], status["revision"]) == ("queued", theirs["revision"])


def test_an_operator_sees_another_users_job_on_every_read_route(submit, client, headers):
    theirs = submit(manifest(1), as_="other")

    for route in [r for m, r in JOB_ROUTES if m == "GET"]:
        response = client.get(route.format(id=theirs["id"]), headers=headers["operator"])

        assert response.status_code == 200, route


def test_an_operator_may_cancel_another_users_job(submit, client, headers):
    theirs = submit(manifest(1), as_="other")

    response = client.post(f"/api/v1/jobs/{theirs['id']}/cancel", headers=headers["operator"])

    assert response.status_code == 200
    assert response.get_json()["status"] == "cancelled"


def test_every_job_names_its_owner_on_creation_reading_and_listing(submit, client, headers):
    mine = submit(manifest(1))
    theirs = submit(manifest(1), as_="other")

    read = client.get(f"/api/v1/jobs/{theirs['id']}", headers=headers["operator"]).get_json()
    listed = client.get("/api/v1/jobs", headers=headers["operator"]).get_json()["jobs"]

    assert (mine["owner"], theirs["owner"], read["owner"]) == (
        "compute_user",
        "other_user",
        "other_user",
    )
    assert {j["id"]: j["owner"] for j in listed} == {
        mine["id"]: "compute_user",
        theirs["id"]: "other_user",
    }


def test_a_job_is_its_users_even_through_a_token_named_otherwise(client, db, tokens):
    token = credentials.new_token("user")
    db.execute(
        """
        INSERT INTO api_tokens (token_sha256, kind, name, user_id)
        SELECT %s, 'user', 'laptop', id FROM users WHERE name = 'compute_user'
        """,
        (auth.token_digest(token),),
    )
    laptop = {"Authorization": f"Bearer {token}"}

    created = client.post("/api/v1/jobs", json=manifest(1), headers=laptop).get_json()
    read = client.get(f"/api/v1/jobs/{created['id']}", headers=laptop).get_json()

    assert created["owner"] == read["owner"] == "compute_user"


def test_an_operator_lists_one_owners_jobs_by_name(submit, client, headers):
    submit(manifest(1))
    theirs = [submit(manifest(1), as_="other")["id"] for _ in range(3)]

    first = client.get("/api/v1/jobs?owner=other_user&limit=2", headers=headers["operator"])
    cursor = first.get_json()["next_cursor"]
    rest = client.get(
        f"/api/v1/jobs?owner=other_user&limit=2&cursor={cursor}", headers=headers["operator"]
    )

    listed = [j["id"] for page in (first, rest) for j in page.get_json()["jobs"]]
    assert listed == theirs[::-1]
    assert rest.get_json()["next_cursor"] is None


def test_a_user_filtering_by_another_owner_or_a_name_no_one_has_sees_no_jobs(
    submit, client, headers
):
    mine = submit(manifest(1))
    submit(manifest(1), as_="other")

    def listed(principal: str, owner: str) -> list[str]:
        response = client.get(f"/api/v1/jobs?owner={owner}", headers=headers[principal])
        assert response.status_code == 200, (principal, owner)
        return [j["id"] for j in response.get_json()["jobs"]]

    assert listed("user", "other_user") == []
    assert listed("user", "compute_user") == [mine["id"]]
    assert listed("operator", "nobody_by_this_name") == []


@pytest.mark.parametrize(
    "query, problem",
    [
        ("owner=", "Length must be between 1 and 200."),
        ("owner=" + "x" * 201, "Length must be between 1 and 200."),
        ("owner=a%00b", "must not contain NUL (\\u0000)"),
        ("owner=a&owner=b", "give this parameter once"),
    ],
)
def test_an_owner_filter_the_list_cannot_use_is_422_naming_the_field(
    query, problem, client, headers
):
    response = client.get(f"/api/v1/jobs?{query}", headers=headers["operator"])

    assert response.status_code == 422
    assert response.get_json()["error"]["details"]["fields"]["owner"] == [problem]


# --- seed-local -------------------------------------------------------------------------------

GIVEN = {
    "CHUNKWISE_SEED_USER_TOKEN": "cwu_given-user-" + "u" * 30,
    "CHUNKWISE_SEED_OPERATOR_TOKEN": "cwu_given-operator-" + "o" * 30,
    "CHUNKWISE_SEED_WORKER_TOKEN": "cww_given-worker-" + "w" * 30,
}


@pytest.fixture(autouse=True)
def _in_scratch_directory(tmp_path, monkeypatch):
    # seed-local keeps the tokens it mints in ./.env: the test's own, never the checkout's.
    monkeypatch.chdir(tmp_path)


def seed(app) -> str:
    """Run `flask --app app seed-local` and return its output."""
    result = app.test_cli_runner().invoke(args=["seed-local"])
    assert result.exit_code == 0, result.output
    return result.output


def states(output: str) -> dict[str, str]:
    """Principal name -> "registered" or "already" from seed-local's table."""
    return {
        line.split()[1]: line.split()[2]
        for line in output.splitlines()
        if line.split()[0] in ("user", "worker")
    }


def test_seed_local_with_given_tokens_is_idempotent_the_tokens_work_and_none_is_printed(
    app, rt, client, db, monkeypatch, tmp_path
):
    for name, token in GIVEN.items():
        monkeypatch.setenv(name, token)

    first = seed(app)
    second = seed(app)

    seeded = {"compute_user", "operator", "local-worker"}
    assert states(first) == dict.fromkeys(seeded, "registered")
    assert states(second) == dict.fromkeys(seeded, "already")
    # Its output lands in docker compose logs: each line names the variable, not the token.
    for name, token in GIVEN.items():
        assert token not in first and token not in second
        assert f"{name} (given)" in first and f"{name} (given)" in second
    assert not (tmp_path / ".env").exists()
    users = db.execute("SELECT name, role FROM users ORDER BY name").fetchall()
    assert users == [
        {"name": "compute_user", "role": "user"},
        {"name": "operator", "role": "operator"},
    ]
    tokens = db.execute("SELECT kind, name FROM api_tokens ORDER BY name").fetchall()
    assert tokens == [
        {"kind": "user", "name": "compute_user"},
        {"kind": "worker", "name": "local-worker"},
        {"kind": "user", "name": "operator"},
    ]
    principals = {name: auth.authenticate(rt.pool, token) for name, token in GIVEN.items()}
    assert principals["CHUNKWISE_SEED_USER_TOKEN"].role == "user"
    assert principals["CHUNKWISE_SEED_OPERATOR_TOKEN"].role == "operator"
    assert principals["CHUNKWISE_SEED_WORKER_TOKEN"].kind == "worker"
    bearer = {name: {"Authorization": f"Bearer {token}"} for name, token in GIVEN.items()}
    assert (
        client.get("/api/v1/events", headers=bearer["CHUNKWISE_SEED_USER_TOKEN"]).status_code == 200
    )
    claim = client.post(
        "/api/v1/tasks/claim",
        headers=bearer["CHUNKWISE_SEED_WORKER_TOKEN"],
        json={"worker_id": WORKER, "workloads": ["echo"]},
    )
    assert claim.status_code == 204


def test_seed_local_without_tokens_mints_each_once_into_a_private_env_file_not_the_output(
    app, rt, db, monkeypatch, tmp_path
):
    for name in GIVEN:
        monkeypatch.delenv(name, raising=False)
    env_file = tmp_path / ".env"
    env_file.write_text("OTHER=kept")  # an older .env, its last line unended

    first = seed(app)
    after_first = env_file.read_text()
    second = seed(app)

    lines = after_first.splitlines()
    assert lines[0] == "OTHER=kept"
    minted = dict(line.split("=", 1) for line in lines[1:])
    assert set(minted) == set(GIVEN)
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert states(first) == dict.fromkeys(
        {"compute_user", "operator", "local-worker"}, "registered"
    )
    for name, token in minted.items():
        assert f"{name} (written to .env)" in first
        assert token not in first
    assert "nothing to do" in second
    assert env_file.read_text() == after_first
    assert db.execute("SELECT count(*) AS n FROM api_tokens").fetchone()["n"] == 3
    assert db.execute("SELECT count(*) AS n FROM users").fetchone()["n"] == 2
    principals = {name: auth.authenticate(rt.pool, token) for name, token in minted.items()}
    assert principals["CHUNKWISE_SEED_USER_TOKEN"].name == "compute_user"
    assert principals["CHUNKWISE_SEED_OPERATOR_TOKEN"].role == "operator"
    assert principals["CHUNKWISE_SEED_WORKER_TOKEN"].name == "local-worker"


@pytest.mark.parametrize(
    "env_file_is",
    [
        "a directory",  # cannot be opened
        "/dev/full",  # opens, but every write fails (ENOSPC): registered, the tokens were lost
    ],
)
def test_seed_local_that_cannot_keep_a_minted_token_registers_nothing(
    app, db, monkeypatch, tmp_path, env_file_is
):
    for name in GIVEN:
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "a directory").mkdir()
    (tmp_path / ".env").symlink_to(tmp_path / env_file_is)
    device_mode = os.stat("/dev/full").st_mode

    result = app.test_cli_runner().invoke(args=["seed-local"])

    assert result.exit_code == 1
    assert "cannot keep new tokens in" in result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    assert db.execute("SELECT count(*) AS n FROM api_tokens").fetchone()["n"] == 0
    assert db.execute("SELECT count(*) AS n FROM users").fetchone()["n"] == 0
    assert os.stat("/dev/full").st_mode == device_mode
    # Nothing was registered, so a re-run able to write mints them rather than finding them.
    (tmp_path / ".env").unlink()
    assert "nothing to do" not in seed(app)


def test_seed_local_whose_write_fails_halfway_leaves_the_env_file_as_it_was(
    app, db, monkeypatch, tmp_path
):
    for name in GIVEN:
        monkeypatch.delenv(name, raising=False)
    env_file = tmp_path / ".env"
    env_file.write_text("OTHER=kept\n")
    real_write = os.write

    def disk_fills_after_a_few_bytes(fd, data):
        if fd > 2 and real_write(fd, bytes(data[:7])):  # part of the first line lands
            monkeypatch.setattr(cli.os, "write", real_write)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(cli.os, "write", disk_fills_after_a_few_bytes)

    result = app.test_cli_runner().invoke(args=["seed-local"])

    assert result.exit_code == 1 and "No space left on device" in result.output
    assert env_file.read_text() == "OTHER=kept\n"
    assert db.execute("SELECT count(*) AS n FROM api_tokens").fetchone()["n"] == 0


def test_seed_local_that_creates_the_env_file_syncs_its_directory_entry(
    app, db, monkeypatch, tmp_path
):
    for name in GIVEN:
        monkeypatch.delenv(name, raising=False)
    synced = []
    monkeypatch.setattr(cli, "sync_to_disk", synced.append)

    seed(app)
    seed(app)

    assert synced == [tmp_path.resolve()]


def test_seed_local_with_nothing_to_mint_leaves_no_env_file_behind(app, db, monkeypatch, tmp_path):
    for name, token in GIVEN.items():
        monkeypatch.setenv(name, token)
    seed(app)
    for name in GIVEN:
        monkeypatch.delenv(name)
    tmp_path.chmod(0o500)  # (root writes here regardless: the assertion below is what counts)

    try:
        output = seed(app)
    finally:
        tmp_path.chmod(0o700)

    assert "nothing to do" in output
    assert not (tmp_path / ".env").exists()


def test_a_job_submitted_by_one_user_is_owned_by_that_user(submit, db, rt, tokens):
    job = submit(manifest(1))

    owner = db.execute(
        "SELECT u.name FROM jobs j JOIN users u ON u.id = j.owner_id WHERE j.id = %s",
        (uuid.UUID(job["id"]),),
    ).fetchone()
    assert owner["name"] == auth.authenticate(rt.pool, tokens["user"]).name


SECRET = "k" * 40


@pytest.mark.parametrize(
    ("variable", "token", "problem"),
    [
        (
            "CHUNKWISE_SEED_OPERATOR_TOKEN",
            "cwu_local-operator-token-change-me-00000",
            "is a placeholder",
        ),
        ("CHUNKWISE_SEED_USER_TOKEN", "cwu_CHANGEME" + SECRET, "is a placeholder"),
        ("CHUNKWISE_SEED_WORKER_TOKEN", "cww_" + "w" * 31, "needs at least 32 characters"),
        ("CHUNKWISE_SEED_USER_TOKEN", "cww_" + SECRET, "must start with cwu_"),
        ("CHUNKWISE_SEED_WORKER_TOKEN", "cwu_" + SECRET, "must start with cww_"),
    ],
)
def test_seed_local_refuses_a_weak_token_naming_its_variable_and_registers_nothing(
    app, db, monkeypatch, variable, token, problem
):
    for name in GIVEN:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, token)

    result = app.test_cli_runner().invoke(args=["seed-local"])

    assert result.exit_code == 1
    assert f"{variable} {problem}" in result.output
    assert token not in result.output
    assert db.execute("SELECT count(*) AS n FROM api_tokens").fetchone()["n"] == 0
    assert db.execute("SELECT count(*) AS n FROM users").fetchone()["n"] == 0


def test_seed_local_names_every_weak_token_at_once(app, monkeypatch):
    monkeypatch.setenv("CHUNKWISE_SEED_USER_TOKEN", "cwu_local-user-token-change-me-0000000000")
    monkeypatch.setenv("CHUNKWISE_SEED_OPERATOR_TOKEN", "cwu_short")
    monkeypatch.setenv("CHUNKWISE_SEED_WORKER_TOKEN", "cww_local-worker-token-change-me-000000")

    output = app.test_cli_runner().invoke(args=["seed-local"]).output

    for variable in GIVEN:
        assert variable in output
