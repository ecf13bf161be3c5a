"""make bench-queue's idle pickup, both sides, on the suite's server: the benchmark cannot rot.

CI does not run the benchmark itself (minutes of load); these run its pickup, the coordinator's
and the bare floor app's it is compared with, for a few rounds each.
"""

from __future__ import annotations

import pytest

from bench.queue import WORKLOAD, floor_pickup_times, floor_server, idle_pickup_times
from devstack.observe import FAST


@pytest.fixture
def stack_env() -> dict:
    """The benchmark's no-op workload allowed, as bench.queue runs the coordinator."""
    return {**FAST, "CHUNKWISE_ALLOWED_WORKLOADS": WORKLOAD}


def test_the_floor_app_hands_each_submitted_row_to_the_claim_already_waiting(database_url):
    with floor_server(database_url) as floor_url:
        times, answers = floor_pickup_times(floor_url, rounds=3)

    assert len(times) == 3 and len(answers) == 3
    # Woken by the NOTIFY: a claim that missed it finds the row at its re-check, 850 ms in.
    assert all(0 < ms < 500 for ms in times)


def test_the_coordinators_pickup_is_timed_to_the_waiting_claim_returning_the_task(stack):
    times, answers = idle_pickup_times(stack, rounds=3)

    assert len(times) == 3 and len(answers) == 3
    # Woken by the NOTIFY: a claim that missed it finds the task at its re-check, 850 ms in.
    assert all(0 < ms < 500 for ms in times)
