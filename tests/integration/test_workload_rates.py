"""A rate-limited workload's claims start at most so many tasks a second, in every coordinator."""

from __future__ import annotations

import threading
import time
import uuid

from app import create_app
from app.runtime import close
from services import jobs, queue, tasks
from tests.integration.csv_worker import settings
from tests.integration.manifests import CREDENTIAL, manifest

RATE = 10  # echo's starts a second, and so its burst
pytestmark = settings(CHUNKWISE_WORKLOAD_RATE_LIMITS=f"echo={RATE}/s")


def fill(rt, user, chunks: int, workload: str = "echo") -> None:
    """Queue a job of `chunks` tasks of the workload."""
    spec = jobs.JobSpec.from_dict(manifest(chunks, workload=workload))
    jobs.create_job(rt, user, spec, trace_id=uuid.uuid4().hex)


def test_a_claim_starts_at_most_a_seconds_worth_at_once_and_the_next_none(rt, user):
    fill(rt, user, 50)

    first = tasks.claim_tasks(rt, "w1", ["echo"], capacity=50, credential_id=CREDENTIAL)
    second = tasks.claim_tasks(rt, "w2", ["echo"], capacity=50, credential_id=CREDENTIAL)

    assert (len(first), len(second)) == (RATE, 0)


def test_the_bucket_refills_as_time_passes(rt, user):
    fill(rt, user, 50)
    tasks.claim_tasks(rt, "w1", ["echo"], capacity=50, credential_id=CREDENTIAL)

    time.sleep(0.35)

    assert len(tasks.claim_tasks(rt, "w1", ["echo"], capacity=50, credential_id=CREDENTIAL)) in (
        3,
        4,
    )


def test_racing_claimers_never_start_more_than_the_rate_allows(rt, user):
    fill(rt, user, 200)
    leased: list[int] = []
    started = time.monotonic()

    def keep_claiming(worker: str) -> None:
        while time.monotonic() - started < 1.5:
            leased.append(
                len(tasks.claim_tasks(rt, worker, ["echo"], capacity=5, credential_id=CREDENTIAL))
            )

    claimers = [threading.Thread(target=keep_claiming, args=(f"w{n}",)) for n in range(4)]
    for claimer in claimers:
        claimer.start()
    for claimer in claimers:
        claimer.join()
    elapsed = time.monotonic() - started

    assert sum(leased) <= RATE + RATE * elapsed
    assert sum(leased) >= RATE + RATE * 1.0  # the burst, then the refill kept coming


def test_coordinators_share_one_bucket(rt, user, app_config):
    fill(rt, user, 50)
    elsewhere = create_app(app_config)
    try:
        other = elsewhere.extensions["chunkwise.runtime"]
        first = tasks.claim_tasks(rt, "w1", ["echo"], capacity=50, credential_id=CREDENTIAL)
        second = tasks.claim_tasks(other, "w2", ["echo"], capacity=50, credential_id=CREDENTIAL)
    finally:
        close(elsewhere.extensions["chunkwise.runtime"])

    assert (len(first), len(second)) == (RATE, 0)


def test_a_workload_without_a_rate_is_not_limited(rt, user):
    fill(rt, user, 30, workload="render")

    assert len(tasks.claim_tasks(rt, "w1", ["render"], capacity=30, credential_id=CREDENTIAL)) == 30


def test_a_claim_of_several_workloads_holds_only_the_limited_one_to_its_rate(rt, user):
    fill(rt, user, 30)
    fill(rt, user, 30, workload="render")

    claimed = tasks.claim_tasks(rt, "w1", ["echo", "render"], capacity=60, credential_id=CREDENTIAL)

    by_workload = [c.task.workload for c in claimed]
    assert (by_workload.count("echo"), by_workload.count("render")) == (RATE, 30)


def test_the_workload_list_shows_each_workloads_rate(client, headers):
    listed = client.get("/api/v1/workloads", headers=headers["operator"]).get_json()

    rates = {w["workload"]: w["max_starts_per_second"] for w in listed["workloads"]}
    assert rates == {"csv_stats": None, "echo": RATE, "render": None}


def test_claims_of_a_paused_rate_limited_workload_spend_no_tokens(rt, user, operator):
    fill(rt, user, 50)
    queue.pause_workload(rt, operator, "echo", paused=True, trace_id="t" * 32)
    assert tasks.claim_tasks(rt, "w1", ["echo"], capacity=50, credential_id=CREDENTIAL) == []

    queue.pause_workload(rt, operator, "echo", paused=False, trace_id="t" * 32)

    assert len(tasks.claim_tasks(rt, "w1", ["echo"], capacity=50, credential_id=CREDENTIAL)) == RATE
