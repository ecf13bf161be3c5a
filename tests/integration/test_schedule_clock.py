"""Schedules keep the database's time: a coordinator whose own clock runs 90 s fast fires each
run when the database says it is due, never early, and skips none."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from services import schedules
from tests.integration.manifests import manifest

EVERY_MINUTE = "* * * * *"
SKEW = timedelta(seconds=90)


class FastClock(datetime):
    """Python's clock on a host that runs 90 s ahead of the database's."""

    @classmethod
    def now(cls, tz=None):
        return datetime.now(tz) + SKEW


@pytest.fixture
def fast_host(monkeypatch):
    """Every clock services.schedules could read from Python runs 90 s fast."""
    monkeypatch.setattr(schedules, "datetime", FastClock)
    monkeypatch.setattr(time, "time", lambda real=time.time: real() + SKEW.total_seconds())


def database_now(db) -> datetime:
    return db.execute("SELECT clock_timestamp() AS now").fetchone()["now"]


def test_a_coordinator_with_a_fast_clock_fires_a_run_when_the_database_says_and_skips_none(
    fast_host, rt, client, headers, db
):
    put = client.put(
        "/api/v1/schedules/minutely",
        json={"cron": EVERY_MINUTE, "job": manifest(1)},
        headers=headers["user"],
    )
    assert put.status_code == 201, put.get_json()
    # Its first run is the next minute by the database's clock, not by the host's.
    first = datetime.fromisoformat(put.get_json()["next_run_at"])
    assert first <= database_now(db) + timedelta(minutes=1)
    slot = database_now(db) + timedelta(seconds=1)
    db.execute("UPDATE schedules SET next_run_at = %s", (slot,))

    early = schedules.run_due_schedules(rt)
    waits = schedules.seconds_until_next_run(rt)
    while database_now(db) <= slot:
        time.sleep(0.05)
    on_time = schedules.run_due_schedules(rt)
    ran_at = database_now(db)

    assert early == 0
    assert waits is not None and 0 < waits <= 1
    assert on_time == 1
    row = db.execute("SELECT next_run_at, last_run_at FROM schedules").fetchone()
    assert row["last_run_at"] == slot
    # The next minute after the run by the database's clock: not one the host has passed.
    assert slot < row["next_run_at"] <= ran_at + timedelta(minutes=1)
    assert row["next_run_at"].second == 0


def test_pausing_and_resuming_on_a_fast_host_runs_next_by_the_databases_clock(
    fast_host, client, headers, db
):
    client.put(
        "/api/v1/schedules/minutely",
        json={"cron": EVERY_MINUTE, "job": manifest(1)},
        headers=headers["user"],
    )
    client.post("/api/v1/schedules/minutely/pause", headers=headers["user"])

    resumed = client.post("/api/v1/schedules/minutely/resume", headers=headers["user"])

    next_run = datetime.fromisoformat(resumed.get_json()["next_run_at"])
    assert next_run <= database_now(db) + timedelta(minutes=1)
    assert next_run.tzinfo is not None and next_run.astimezone(UTC).second == 0
