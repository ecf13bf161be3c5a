"""chunkwise-worker waits out a refused long poll's Retry-After instead of asking again at once."""

from __future__ import annotations

import re
import time

import pytest
import requests

from devstack.observe import FAST

WATCHED_SECONDS = 10


@pytest.fixture
def stack_env() -> dict:
    """No waiting places at all: every claim that finds nothing is refused its wait."""
    return {**FAST, "CHUNKWISE_MAX_WAITING_REQUESTS": "0"}


def refused_waits(stack) -> float:
    """chunkwise_refused_waits_total, summed over the coordinator's processes."""
    text = requests.get(
        f"{stack.url}/metrics",
        headers={"Authorization": f"Bearer {stack.tokens.operator}"},
        timeout=10,
    ).text
    found = re.search(r"^chunkwise_refused_waits_total (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_a_worker_refused_its_wait_asks_again_only_after_retry_after(stack):
    before = refused_waits(stack)
    stack.start_worker("patient", "--wait-seconds", "10")
    time.sleep(WATCHED_SECONDS)
    refused = refused_waits(stack) - before

    # Retry-After is 3 s: at most one claim every 3 s, where its idle poll alone (1 s) would
    # have asked ten times.
    assert 1 <= refused <= WATCHED_SECONDS / 3 + 1, refused
