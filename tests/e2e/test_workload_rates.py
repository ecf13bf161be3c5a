"""A rate limit holds across gunicorn's processes and real workers: starts spread out in time."""

from __future__ import annotations

from datetime import datetime

import pytest

from devstack.observe import FAST, SHORT_POLL, totals_of
from devstack.sample_csv import generate_csv

RATE = 2  # csv_stats chunks started a second, and so the burst
# How much earlier a claim's recorded start (its transaction's) may be than the statement that
# spent the token, when it waited for its turn.
SLACK_SECONDS = 0.1


@pytest.fixture
def stack_env() -> dict:
    """The usual fast stack, with csv_stats limited to RATE starts a second."""
    return {**FAST, "CHUNKWISE_WORKLOAD_RATE_LIMITS": f"csv_stats={RATE}/s"}


def test_two_workers_start_a_rate_limited_jobs_chunks_no_faster_than_the_rate(stack, jobs):
    data = generate_csv(20_000, seed=31)
    job = jobs.submit(data, 8)
    for name in ("worker-a", "worker-b"):
        stack.start_worker(name, *SHORT_POLL, "--capacity", "2")

    done = jobs.wait(job["id"], "succeeded", timeout=60)

    assert done["result"] == totals_of(data)
    starts = sorted(
        datetime.fromisoformat(a["started_at"])
        for chunk in jobs.chunks(job["id"])
        for a in chunk["attempts"]
    )
    # A token bucket's promise: from any start to any later one, at most a burst plus the
    # rate times the time between them.
    for i, first in enumerate(starts):
        for j in range(i, len(starts)):
            between = (starts[j] - first).total_seconds() + SLACK_SECONDS
            assert j - i + 1 <= RATE + RATE * between, (i, j, starts)
    assert (starts[-1] - starts[0]).total_seconds() >= (len(starts) - RATE) / RATE - SLACK_SECONDS
