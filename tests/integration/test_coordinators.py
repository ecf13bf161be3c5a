"""Coordinators on one database check in, and one whose shared settings differ from a live
coordinator started before it logs an error and is not ready, naming the setting."""

from __future__ import annotations

import hashlib
import logging

import pytest

from app import create_app, maintenance
from app.runtime import close
from devstack.observe import wait_for
from services import coordinators

KEY = "k" * 40


@pytest.fixture
def second_app(app_config):
    """Start another coordinator on the same database, with `overrides` to its settings."""
    started = []

    def start(**overrides: str):
        other = create_app({**app_config, **overrides})
        started.append(other)
        return other

    yield start
    for other in started:
        close(other.extensions["chunkwise.runtime"])


def runtime_of(app):
    return app.extensions["chunkwise.runtime"]


def readyz(app):
    return app.test_client().get("/readyz")


def rows(db) -> list[dict]:
    return db.execute("SELECT * FROM coordinators ORDER BY started_at").fetchall()


def test_coordinators_with_the_same_settings_are_both_ready(app, second_app, db):
    other = second_app()

    coordinators.check_in(runtime_of(app))
    coordinators.check_in(runtime_of(other))

    assert readyz(app).status_code == 200
    assert readyz(other).status_code == 200
    first, second = rows(db)
    assert first["fingerprint"] == second["fingerprint"]
    assert first["id"] != second["id"] and first["host"] and first["version"]


def test_a_coordinator_with_another_session_key_is_not_ready_and_names_it(second_app, db, caplog):
    first = second_app(CHUNKWISE_SECRET_KEY=KEY)
    coordinators.check_in(runtime_of(first))
    other = second_app(CHUNKWISE_SECRET_KEY="o" * 40)

    with caplog.at_level(logging.ERROR, logger="services.coordinators"):
        coordinators.check_in(runtime_of(other))
        coordinators.check_in(runtime_of(other))
    answer = readyz(other)

    assert answer.status_code == 503 and answer.headers["Retry-After"]
    error = answer.get_json()["error"]
    assert error["code"] == "settings_differ"
    assert error["details"]["settings"] == ["CHUNKWISE_SECRET_KEY"]
    assert "CHUNKWISE_SECRET_KEY" in error["message"]
    [line] = [r for r in caplog.records if r.event == "coordinator_settings_differ"]  # once
    assert line.settings == ["CHUNKWISE_SECRET_KEY"]
    # The one started first stays ready: a host started wrong does not take the others down.
    assert readyz(first).status_code == 200


def test_a_coordinator_with_other_lease_caps_is_not_ready_and_names_them(app, second_app):
    coordinators.check_in(runtime_of(app))
    other = second_app(CHUNKWISE_MAX_LEASES_TOTAL="9", CHUNKWISE_MAX_LEASES_PER_WORKER="3")

    error = readyz(other).get_json()["error"]

    assert error["details"]["settings"] == [
        "CHUNKWISE_MAX_LEASES_PER_WORKER",
        "CHUNKWISE_MAX_LEASES_TOTAL",
    ]
    [seen] = error["details"]["coordinators"]
    assert seen["id"] == runtime_of(app).coordinator.id


def test_a_dead_coordinators_row_does_not_count(app, second_app, db):
    coordinators.check_in(runtime_of(app))
    db.execute(
        "UPDATE coordinators SET last_seen_at = now() - interval '1 hour', "
        "expires_at = now() - interval '59 minutes'"
    )
    other = second_app(CHUNKWISE_MAX_LEASES_TOTAL="9")

    assert readyz(other).status_code == 200


def test_a_coordinator_that_stops_cleanly_removes_its_row(second_app, db):
    other = second_app()
    coordinators.check_in(runtime_of(other))
    assert len(rows(db)) == 1

    close(runtime_of(other))

    assert rows(db) == []


def test_the_maintenance_thread_registers_its_coordinator_at_start(app, rt, db):
    thread = maintenance.start(app, 60)  # its first pass a minute away
    try:
        [row] = wait_for(lambda: rows(db), timeout=10)
    finally:
        rt.stopping.set()
        rt.schedules_changed.set()
        thread.join(timeout=5)

    assert row["id"] == rt.coordinator.id
    assert row["last_seen_at"] <= row["expires_at"]


def test_the_row_holds_a_slow_digest_of_the_session_key_never_the_key(second_app, db):
    other = second_app(CHUNKWISE_SECRET_KEY=KEY)
    coordinators.check_in(runtime_of(other))

    [row] = db.execute("SELECT row_to_json(c)::text AS text FROM coordinators c").fetchall()
    digest = rows(db)[0]["setting_digests"]["CHUNKWISE_SECRET_KEY"]

    assert KEY not in row["text"]
    assert digest != hashlib.sha256(KEY.encode()).hexdigest()
    assert len(digest) == 64


def test_readyz_on_a_database_without_the_coordinators_table_says_the_schema_is_behind(app, db):
    db.execute("DROP TABLE coordinators")
    db.execute("DELETE FROM _yoyo_migration WHERE migration_id = '0029.coordinators'")

    error = readyz(app).get_json()["error"]

    assert error["code"] == "schema_behind"
    assert error["details"]["missing_migrations"] == ["0029.coordinators"]
