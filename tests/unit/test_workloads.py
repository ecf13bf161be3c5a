"""The served workloads as a coordinator holds them: seeded from settings, replaced whole."""

from __future__ import annotations

import pytest

from app.config import ConfigError, load_settings
from services import csvstats, workload_registry
from services.csvjobs import CsvStats
from services.errors import InvalidInput
from services.workloads import Caps, Workload, Workloads

URL = "postgresql://localhost/chunkwise"
CAPS = Caps(None, None, max_queued_tasks=100, max_tasks_per_job=10)


def test_loading_serves_exactly_the_workloads_given_each_under_its_kinds_rules():
    workloads = Workloads({"echo": CAPS}, workload_registry.KINDS)

    workloads.load({"csv_stats": CAPS, "square": CAPS})

    assert workloads.names() == ["csv_stats", "square"]
    assert workloads.get("echo") is None
    assert isinstance(workloads.of("csv_stats"), CsvStats)
    assert type(workloads.of("square")) is Workload
    assert workloads.of("square").name == "square"


def test_a_workload_no_longer_served_has_no_room_for_new_tasks():
    workloads = Workloads({"echo": CAPS})

    workloads.load({})

    assert workloads.of("echo").caps.max_queued_tasks == 0
    with pytest.raises(InvalidInput, match="unknown workloads: echo"):
        workloads.require(["echo"], "workloads")


def test_the_settings_seed_csv_stats_and_every_allowed_workload_with_its_rate():
    env = {
        "DATABASE_URL": URL,
        "CHUNKWISE_ALLOWED_WORKLOADS": "email,render",
        "CHUNKWISE_WORKLOAD_RATE_LIMITS": "email=10/s",
        "CHUNKWISE_MANIFEST_MAX_QUEUED_TASKS": "400",
        "CHUNKWISE_MANIFEST_MAX_TASKS_PER_JOB": "40",
    }

    seeds = workload_registry.seed_caps(load_settings(env).limits)

    assert sorted(seeds) == ["csv_stats", "email", "render"]
    assert seeds["csv_stats"].max_tasks_per_job == csvstats.MAX_CHUNKS
    assert (seeds["email"].max_queued_tasks, seeds["email"].max_tasks_per_job) == (400, 40)
    assert seeds["email"].max_starts_per_second == 10
    assert seeds["render"].max_starts_per_second is None


def test_csv_stats_is_seeded_with_no_more_chunks_a_job_than_its_queue_holds():
    limits = load_settings({"DATABASE_URL": URL, "CHUNKWISE_MAX_QUEUED_CHUNKS": "10"}).limits

    assert workload_registry.seed_caps(limits)["csv_stats"].max_tasks_per_job == 10


def test_an_added_workloads_default_caps_follow_the_queue_it_is_given():
    limits = load_settings({"DATABASE_URL": URL}).limits

    caps = workload_registry.manifest_caps(limits, max_queued_tasks=20)

    assert caps.max_queued_tasks == 20
    assert caps.max_tasks_per_job == 20  # never more than its queue holds
    assert caps.max_queued_tasks_per_user == 5  # a quarter, the fair share's default


@pytest.mark.parametrize("name", ["Email", "1st", "with space", "x" * 64, "ünï"])
def test_an_allowed_workload_that_is_not_a_slug_is_refused_at_start(name):
    env = {"DATABASE_URL": URL, "CHUNKWISE_ALLOWED_WORKLOADS": name}

    with pytest.raises(ConfigError, match="CHUNKWISE_ALLOWED_WORKLOADS has names that are not"):
        load_settings(env)
