"""The claim channel is announced by triggers, whichever code path changed a task."""

from __future__ import annotations

import psycopg
import pytest

from repositories import channels
from tests.integration.manifests import WORKER, manifest


@pytest.fixture
def announcements(database_url):
    """How many chunkwise_claimable notifications arrived since the last call."""
    conn = psycopg.connect(database_url, autocommit=True)
    channels.listen(conn)

    def count() -> int:
        return sum(1 for n in conn.notifies(timeout=0.2) if n.channel == channels.CLAIMABLE)

    yield count
    conn.close()


def test_a_new_job_announces_claimable_tasks(submit, announcements):
    submit(manifest(3))
    assert announcements() == 1  # one transaction: its repeats fold into one


def test_a_claim_announces_nothing(submit, claim, announcements):
    submit(manifest(2))
    announcements()
    assert claim(WORKER, capacity=2)
    assert announcements() == 0


def test_a_retried_task_and_a_freed_lease_are_announced(submit, claim, task_call, announcements):
    submit(manifest(2))
    first, second = claim(WORKER, capacity=2)
    announcements()
    failure = {
        "worker_id": WORKER,
        "attempt": first["attempt"],
        "error_code": "boom",
        "error_message": "",
        "retryable": True,
        "details": {},
    }
    assert task_call(first["task_id"], "failure", failure).status_code == 200
    assert announcements() == 1
    result = {
        "worker_id": WORKER,
        "attempt": second["attempt"],
        "result_uri": "s3://out/2",
        "result_sha256": "a" * 64,
    }
    assert task_call(second["task_id"], "result", result).status_code == 200
    assert announcements() == 1
