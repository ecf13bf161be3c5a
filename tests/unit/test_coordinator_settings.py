"""The digests coordinators compare: equal settings agree however they are written, and a
difference is named by its variable."""

from __future__ import annotations

from datetime import UTC, datetime

from app.config import load_settings, shared_settings
from repositories.coordinators import CoordinatorRow
from services import coordinators

BASE = {"DATABASE_URL": "postgresql://postgres@127.0.0.1/x", "CHUNKWISE_SECRET_KEY": "k" * 40}


def coordinator(**env: str) -> coordinators.Coordinator:
    settings = load_settings({**BASE, **env})
    return coordinators.describe(
        id="h-1-abcdef",
        host="h",
        pid=1,
        version="0",
        shared_settings=shared_settings(settings),
        secret_key=settings.secret_key,
        maintenance_seconds=settings.maintenance_seconds,
    )


def as_row(c: coordinators.Coordinator) -> CoordinatorRow:
    now = datetime.now(UTC)
    return CoordinatorRow(
        c.id, c.host, c.pid, c.version, now, now, now, c.fingerprint, dict(c.setting_digests)
    )


def test_the_same_workloads_and_rates_in_another_order_agree():
    one = coordinator(
        CHUNKWISE_ALLOWED_WORKLOADS="echo,render",
        CHUNKWISE_WORKLOAD_RATE_LIMITS="echo=60/min,render=2/s",
    )
    other = coordinator(
        CHUNKWISE_ALLOWED_WORKLOADS="render, echo",
        CHUNKWISE_WORKLOAD_RATE_LIMITS="render=2/s,echo=1/s",
    )

    assert one.fingerprint == other.fingerprint
    assert coordinators.disagreements(one, [as_row(other)]) == []


def test_a_difference_is_named_by_its_variable_and_nothing_else_is():
    one = coordinator()
    other = coordinator(CHUNKWISE_SECRET_KEY="o" * 40, CHUNKWISE_RETENTION_DAYS="7")

    [found] = coordinators.disagreements(one, [as_row(other)])

    assert found.settings == ("CHUNKWISE_RETENTION_DAYS", "CHUNKWISE_SECRET_KEY")
    assert found.host == "h"


def test_settings_each_host_may_choose_for_itself_are_not_compared():
    one = coordinator()
    other = coordinator(CHUNKWISE_DB_POOL_MAX="40", CHUNKWISE_LOG_LEVEL="DEBUG")

    assert one.fingerprint == other.fingerprint


def test_a_coordinator_counts_as_live_for_three_passes_and_a_minute_at_least():
    assert coordinator().live_seconds == 60
    assert coordinator(CHUNKWISE_MAINTENANCE_SECONDS="30").live_seconds == 90
