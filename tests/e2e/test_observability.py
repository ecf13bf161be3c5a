"""What an operator sees of a real run: /metrics across gunicorn processes, and JSON logs.

Every scrape goes over a fresh connection with the stack's scrape token (CHUNKWISE_METRICS_TOKEN),
so any of the coordinator's processes may answer; queue figures are cached for up to 2 s, hence
the waits.
"""

from __future__ import annotations

import json

import pytest
import requests
from prometheus_client.mmap_dict import MmapedDict

from devstack.observe import (
    FAST,
    SHORT_POLL,
    events,
    log_lines,
    scrape,
    start_one_chunk_worker,
    wait_for,
)
from devstack.sample_csv import generate_csv
from worker_cli.worker import CRASH_EXIT_STATUS

WEB_WORKERS = 2


@pytest.fixture
def stack_env() -> dict:
    """Two gunicorn processes, as in production, so sums across processes are tested."""
    return {**FAST, "CHUNKWISE_WEB_WORKERS": str(WEB_WORKERS)}


def scraped(stack, name: str, expected: float, **labels: str) -> bool:
    """Whether a scrape now shows `name{labels}` at `expected`."""
    return scrape(stack).value(name, **labels) == expected


def rejections_by_process(stack) -> dict[int, float]:
    """chunkwise_admission_rejections_total as each coordinator process counted it."""
    counts = {}
    for path in (stack.run_dir / "prometheus").glob("counter_*.db"):
        pid = int(path.stem.rsplit("_", 1)[1])
        for key, value, *_ in MmapedDict.read_all_values_from_file(str(path)):
            if json.loads(key)[1] == "chunkwise_admission_rejections_total":
                counts[pid] = counts.get(pid, 0) + value
    return counts


def test_chunk_gauges_follow_a_job_from_pending_to_completed(stack, jobs):
    job = jobs.submit(generate_csv(8_000, seed=30), 8)
    wait_for(
        lambda: scraped(stack, "chunkwise_cluster_chunks", 8, state="pending"),
        10,
        what="8 pending chunks on /metrics",
    )

    stack.start_worker("worker", *SHORT_POLL, "--capacity", "2")
    jobs.wait(job["id"], "succeeded", timeout=30)

    def all_completed() -> bool:
        metrics = scrape(stack)
        return (
            metrics.value("chunkwise_cluster_chunks", state="completed"),
            metrics.value("chunkwise_cluster_chunks", state="pending"),
        ) == (8, 0)

    wait_for(all_completed, 10, what="8 completed and no pending chunks on /metrics")


def test_lease_expiry_counter_counts_the_lease_of_a_crashed_worker(stack, jobs):
    job = jobs.submit(generate_csv(4_000, seed=31), 2)
    wait_for(
        lambda: scrape(stack).has("chunkwise_cluster_lease_expiries_total"),
        10,
        what="the lease expiry counter on /metrics",
    )
    assert scrape(stack).value("chunkwise_cluster_lease_expiries_total") == 0
    crasher = start_one_chunk_worker(stack, "crasher", "crash-after-compute")
    assert crasher.wait(timeout=20) == CRASH_EXIT_STATUS
    stack.start_worker("survivor", *SHORT_POLL, "--capacity", "2")

    jobs.wait(job["id"], "succeeded", timeout=30)

    wait_for(
        lambda: scraped(stack, "chunkwise_cluster_lease_expiries_total", 1),
        10,
        what="one lease expiry on /metrics",
    )


def test_merge_counter_and_duration_histogram_count_one_merge(stack, jobs):
    before = scrape(stack)
    assert before.value("chunkwise_merges_total", outcome="succeeded") == 0
    assert before.value("chunkwise_merge_duration_seconds_count") == 0
    job = jobs.submit(generate_csv(4_000, seed=32), 4)
    stack.start_worker("worker", *SHORT_POLL, "--capacity", "2")

    jobs.wait(job["id"], "succeeded", timeout=30)

    after = scrape(stack)
    assert after.value("chunkwise_merges_total", outcome="succeeded") == 1
    assert after.value("chunkwise_merge_duration_seconds_count") == 1
    assert after.value("chunkwise_merge_duration_seconds_sum") > 0


def test_heartbeat_age_is_exported_for_each_worker(stack, jobs):
    stack.start_worker("watched", *SHORT_POLL, "--capacity", "1")
    wait_for(lambda: events(stack, "watched", "started"), 10, what="the worker to start")

    wait_for(
        lambda: scrape(stack).has(
            "chunkwise_cluster_worker_heartbeat_age_seconds", worker_id="watched"
        ),
        10,
        what="the worker's heartbeat age on /metrics",
    )

    assert (
        0
        <= scrape(stack).value(
            "chunkwise_cluster_worker_heartbeat_age_seconds", worker_id="watched"
        )
        < 10
    )


def test_http_metrics_are_labelled_with_the_route_template_not_the_path(stack, jobs):
    job = jobs.submit(generate_csv(1_000, seed=33), 1)
    for _ in range(3):
        jobs.get(job["id"])

    metrics = scrape(stack)

    route = "/api/v1/jobs/<uuid:job_id>"
    assert (
        metrics.value(
            "chunkwise_http_request_duration_seconds_count",
            method="GET",
            url_rule=route,
            status="200",
        )
        == 3
    )
    assert metrics.value("chunkwise_http_request_total", method="GET", status="200") >= 3
    assert job["id"] not in metrics.text, "a raw path leaked into a label"


# Three 64-chunk jobs of one user: past a user's default share, which this test is not about.
@pytest.mark.parametrize(
    "stack_env",
    [
        {
            **FAST,
            "CHUNKWISE_WEB_WORKERS": str(WEB_WORKERS),
            "CHUNKWISE_USER_MAX_QUEUED_PERCENT": "100",
        }
    ],
    ids=["one-user-queue"],
)
def test_counters_are_summed_across_gunicorn_processes_not_reported_per_process(stack, jobs):
    jobs.submit(generate_csv(640, seed=34), 64)
    jobs.submit(generate_csv(640, seed=35), 64)
    jobs.submit(generate_csv(640, seed=36), 64)
    jobs.submit(generate_csv(640, seed=37), 64)  # 256 chunks: the queue is full
    extra = generate_csv(10, seed=38)

    refused = 0
    # Fresh connections until both processes have refused some, so both hold a share.
    while len([n for n in rejections_by_process(stack).values() if n]) < WEB_WORKERS:
        assert refused < 100, f"one process answered everything: {rejections_by_process(stack)}"
        with requests.Session() as fresh:
            fresh.headers["Authorization"] = f"Bearer {stack.tokens.user}"
            assert jobs.post(extra, 1, session=fresh).status_code == 429
        refused += 1

    assert sum(rejections_by_process(stack).values()) == refused
    for _ in range(10):
        assert scrape(stack).value("chunkwise_admission_rejections_total") == refused


def claimed_attempt(stack, worker: str) -> dict:
    """The worker's first `claimed` line: the ids every line of that attempt should carry."""
    return events(stack, worker, "claimed")[0]


def test_coordinator_and_worker_lines_of_one_attempt_share_trace_and_attempt_ids(stack, jobs):
    job = jobs.submit(generate_csv(4_000, seed=39), 2)
    stack.start_worker("traced", *SHORT_POLL, "--capacity", "1")
    jobs.wait(job["id"], "succeeded", timeout=30)

    claimed = claimed_attempt(stack, "traced")
    trace_id, attempt_id = claimed["trace_id"], claimed["attempt_id"]
    worker_lines = [
        line for line in log_lines(stack, "traced") if line.get("attempt_id") == attempt_id
    ]
    assert {line["event"] for line in worker_lines} >= {"claimed", "computed", "submitted"}
    assert {line["trace_id"] for line in worker_lines} == {trace_id}

    coordinator = log_lines(stack, "coordinator")
    leased = [
        line
        for line in coordinator
        if line.get("event") == "task_leased" and line.get("attempt_id") == attempt_id
    ]
    assert [line["attempt_trace_id"] for line in leased] == [trace_id]
    traced = [line for line in coordinator if line.get("trace_id") == trace_id]
    # The call that completes this attempt may also lease the next task (complete and fetch):
    # that lease is logged under the call's trace, naming its own attempt and attempt trace.
    fetched = [
        line
        for line in traced
        if line.get("event") == "task_leased" and line.get("attempt_trace_id") != trace_id
    ]
    assert all(line["attempt_id"] != attempt_id for line in fetched)
    own = [line for line in traced if line not in fetched]
    assert "task_completed" in {line["event"] for line in own}
    assert {line.get("attempt_id") for line in own} == {attempt_id}, (
        f"the coordinator's lines of the attempt do not name it: {own}"
    )


def test_chunk_view_shows_the_trace_id_the_worker_logged_for_each_attempt(stack, jobs):
    job = jobs.submit(generate_csv(4_000, seed=40), 2)
    stack.start_worker("traced", *SHORT_POLL, "--capacity", "1")
    jobs.wait(job["id"], "succeeded", timeout=30)
    logged = {line["attempt_id"]: line["trace_id"] for line in events(stack, "traced", "claimed")}

    for chunk in jobs.chunks(job["id"]):
        view = jobs.session.get(
            f"{stack.url}/api/v1/jobs/{job['id']}/chunks/{chunk['id']}", timeout=10
        )
        assert view.status_code == 200, view.text
        attempts = view.json()["attempts"]
        assert attempts and all(a["trace_id"] == logged[a["attempt_id"]] for a in attempts)


def test_every_coordinator_process_refuses_a_scrape_without_a_credential(stack):
    # Fresh connections, so each gunicorn process is likely asked at least once.
    for _ in range(4 * WEB_WORKERS):
        anonymous = requests.get(f"{stack.url}/metrics", timeout=10)
        as_worker = requests.get(
            f"{stack.url}/metrics",
            headers={"Authorization": f"Bearer {stack.tokens.worker}"},
            timeout=10,
        )
        assert anonymous.status_code == 401
        assert anonymous.json()["error"]["details"] == {"header": "Authorization"}
        assert as_worker.status_code == 403
    operator = stack.api(stack.tokens.operator).get(f"{stack.url}/metrics", timeout=10)
    assert operator.status_code == 200
