"""A slow or absent database is a 503 with Retry-After, never a raw database error."""

import threading
import time

import psycopg
import pytest

from app import create_app
from app.runtime import close
from services.wakeups import Wakeups


@pytest.fixture
def impatient_app(app_config):
    """The app with a 300 ms statement timeout."""
    flask_app = create_app({**app_config, "CHUNKWISE_DB_STATEMENT_TIMEOUT_MS": "300"})
    yield flask_app
    close(flask_app.extensions["chunkwise.runtime"])


def test_a_statement_that_times_out_is_503_with_retry_after(impatient_app, database_url):
    from services import credentials

    runtime = impatient_app.extensions["chunkwise.runtime"]
    token = credentials.create_user(runtime.pool, "patient", "user").token
    locked, release = threading.Event(), threading.Event()

    def hold_the_jobs_table():
        with psycopg.connect(database_url) as conn:
            conn.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
            locked.set()
            release.wait(10)

    holder = threading.Thread(target=hold_the_jobs_table)
    holder.start()
    try:
        assert locked.wait(5)
        response = impatient_app.test_client().get(
            "/api/v1/jobs", headers={"Authorization": f"Bearer {token}"}
        )
    finally:
        release.set()
        holder.join()

    assert response.status_code == 503
    assert response.headers["Retry-After"]
    body = response.get_json()
    assert body["error"]["code"] == "unavailable"
    assert "canceling statement" not in body["error"]["message"]
    assert body["trace_id"]


def test_readyz_is_503_while_the_database_is_unreachable(app_config):
    # A port nothing listens on: the app still starts and says it is not ready.
    flask_app = create_app(
        {**app_config, "DATABASE_URL": "postgresql://postgres@127.0.0.1:1/nowhere"}
    )
    try:
        response = flask_app.test_client().get("/readyz")
    finally:
        close(flask_app.extensions["chunkwise.runtime"])

    assert response.status_code == 503
    assert response.get_json()["error"]["code"] == "unavailable"
    assert response.headers["Retry-After"]


def test_liveness_does_not_need_the_database(app_config):
    flask_app = create_app(
        {**app_config, "DATABASE_URL": "postgresql://postgres@127.0.0.1:1/nowhere"}
    )
    try:
        response = flask_app.test_client().get("/healthz")
    finally:
        close(flask_app.extensions["chunkwise.runtime"])

    assert response.status_code == 200


def test_pooled_connections_cut_off_with_the_listener_are_replaced_before_a_request_meets_one(
    client, headers, rt, db, eventually
):
    # Every process's pool holds idle connections; a restart or pg_terminate_backend ends
    # them all at once, the listener's too. The listener notices at once; the pool must too.
    for _ in range(3):
        assert client.get("/api/v1/events", headers=headers["user"]).status_code == 200
    assert eventually(5.0, lambda: rt.pool.get_stats()["pool_available"] >= 1)
    assert eventually(5.0, lambda: rt.principals.generation() >= 1)  # the listener is up
    before = rt.principals.generation()

    db.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    # The listener forgets every token each time it connects: it is back.
    assert eventually(5.0, lambda: rt.principals.generation() > before)

    answers = [client.get("/api/v1/events", headers=headers["user"]).status_code for _ in range(5)]
    assert answers == [200] * 5


def test_the_listener_keeps_reconnecting_when_acting_on_its_lost_connection_fails(eventually):
    lost = []

    def pool_closed() -> None:
        lost.append(time.monotonic())
        raise RuntimeError("the pool is closed")

    wakeups = Wakeups("postgresql://postgres@127.0.0.1:1/nowhere", recheck_connections=pool_closed)
    wakeups.start()
    try:
        # Each failed connect is a lost connection; a second one means the thread lived on.
        assert eventually(5.0, lambda: len(lost) >= 2)
    finally:
        wakeups.stop()


def test_the_listener_rechecks_the_pool_when_cut_off_and_again_once_back_before_anything_else(
    database_url, db, eventually
):
    # Backends ended together do not all exit at once: one may still answer the first check.
    calls = []
    wakeups = Wakeups(
        database_url,
        credentials_changed=lambda: calls.append("credentials"),
        recheck_connections=lambda: calls.append("recheck"),
    )
    wakeups.start()
    try:
        assert eventually(5.0, lambda: calls == ["credentials"])
        db.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'LISTEN%'"
        )

        assert eventually(5.0, lambda: len(calls) >= 4)
        assert calls == ["credentials", "recheck", "recheck", "credentials"]
    finally:
        wakeups.stop()
