"""CoordinatorClient against a tiny local HTTP server: headers, status mapping, streaming."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from worker_cli.client import (
    CoordinatorClient,
    CoordinatorUnavailable,
    LeaseLost,
    RequestRejected,
    StorageFailed,
    rejection_of,
    settings_problem,
    traceparent,
)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
LEASE = "cwl_" + "a" * 64
BEAT = {"task_id": "t1", "attempt": 1}  # one heartbeat of a batch
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-01$")


class Coordinator:
    """Answers each request with the next scripted reply and records what it was sent."""

    def __init__(self) -> None:
        self.replies: list[tuple[int, dict, bytes, float]] = []
        self.requests: list[dict] = []
        coordinator = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                coordinator.requests.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "headers": dict(self.headers),
                        "json": json.loads(body) if body else None,
                    }
                )
                status, headers, payload, delay = coordinator.replies.pop(0)
                time.sleep(delay)
                try:
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out on purpose and hung up

            do_GET = do_POST = _serve

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def reply(self, status: int, body=None, *, headers=None, raw: bytes | None = None, delay=0.0):
        """Script the next reply: a JSON object (or raw bytes) with a status."""
        headers = dict(headers or {})
        if raw is None:
            raw = b"" if body is None else json.dumps(body).encode()
            headers.setdefault("Content-Type", "application/json")
        self.replies.append((status, headers, raw, delay))


@pytest.fixture
def coordinator():
    server = Coordinator()
    server.thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


@pytest.fixture
def client(coordinator):
    c = CoordinatorClient(coordinator.url, "s3cret", timeout=2)
    yield c
    c.close()


def error_body(code: str, message: str = "no") -> dict:
    return {"error": {"code": code, "message": message, "details": {"x": 1}}, "trace_id": TRACE_ID}


def test_every_call_sends_bearer_token_and_the_attempts_traceparent(client, coordinator):
    renewed = {"task_id": BEAT["task_id"], "outcome": "renewed", "status": 200, "error": None}
    coordinator.reply(200, {"results": [renewed], "trace_id": TRACE_ID})
    coordinator.reply(200, {"results": [renewed], "trace_id": TRACE_ID})

    for _ in range(2):
        client.renew_leases(worker_id="w", heartbeats=[BEAT], trace_id=TRACE_ID)

    spans = set()
    for request in coordinator.requests:
        assert request["headers"]["Authorization"] == "Bearer s3cret"
        trace, span = TRACEPARENT.match(request["headers"]["traceparent"]).groups()
        assert trace == TRACE_ID
        spans.add(span)
    assert len(spans) == 2, "each call gets a fresh span id"


def test_every_chunk_of_a_job_is_listed_by_following_its_pages(client, coordinator):
    chunks = [{"index": i, "id": str(i)} for i in range(1500)]
    coordinator.reply(200, {"chunks": chunks[:1000], "next_after": 999})
    coordinator.reply(200, {"chunks": chunks[1000:], "next_after": 1499})

    listed = client.list_chunks("6f1c1a1e-0000-4000-8000-000000000000")

    assert listed == {"chunks": chunks}
    queries = [r["path"].partition("?")[2] for r in coordinator.requests]
    assert queries == ["after=-1&limit=1000", "after=999&limit=1000"]


def test_every_result_of_a_job_is_listed_following_next_after_until_null(client, coordinator):
    results = [{"chunk_index": 2 * i} for i in range(1001)]
    coordinator.reply(200, {"results": results[:1000], "next_after": 1998})
    coordinator.reply(200, {"results": results[1000:], "next_after": None})

    listed = client.list_results("6f1c1a1e-0000-4000-8000-000000000000")

    assert listed == {"results": results}
    queries = [r["path"].partition("?")[2] for r in coordinator.requests]
    assert queries == ["limit=10000", "limit=10000&after=1998"]


def test_claims_without_a_trace_id_get_a_fresh_one_per_poll(client, coordinator):
    coordinator.reply(204)
    coordinator.reply(204)

    client.claim_tasks(worker_id="w", workloads=["csv_stats"], capacity=2)
    client.claim_tasks(worker_id="w", workloads=["csv_stats"], capacity=2)

    traces = {TRACEPARENT.match(r["headers"]["traceparent"]).group(1) for r in coordinator.requests}
    assert len(traces) == 2


def test_uuid_style_trace_ids_are_sent_as_w3c_hex():
    header = traceparent("4BF92F35-77B3-4DA6-A3CE-929D0E0E4736")
    assert TRACEPARENT.match(header).group(1) == TRACE_ID


def test_a_trace_id_that_is_not_32_hex_digits_whole_is_replaced_by_a_fresh_one():
    for given in [TRACE_ID + "\n", TRACE_ID + "0", "0" * 32, "not hex"]:
        header = traceparent(given)
        assert "\n" not in header, repr(given)
        assert TRACEPARENT.fullmatch(header).group(1) != given.strip(), repr(given)


def test_claim_returns_tasks_and_sends_the_claim_body(client, coordinator):
    coordinator.reply(200, {"tasks": [{"task_id": "t1"}], "trace_id": TRACE_ID})

    tasks = client.claim_tasks(worker_id="w", workloads=["csv_stats"], capacity=3, wait_seconds=5)

    assert tasks == [{"task_id": "t1"}]
    request = coordinator.requests[0]
    assert (request["method"], request["path"]) == ("POST", "/api/v1/tasks/claim")
    assert request["json"] == {
        "worker_id": "w",
        "workloads": ["csv_stats"],
        "capacity": 3,
        "wait_seconds": 5,
    }


def test_claim_204_means_no_tasks(client, coordinator):
    coordinator.reply(204)
    assert client.claim_tasks(worker_id="w", workloads=["csv_stats"], capacity=1) == []


def test_long_poll_claim_waits_longer_than_the_default_timeout(coordinator):
    short = CoordinatorClient(coordinator.url, "s3cret", timeout=0.2)
    coordinator.reply(204, delay=0.5)
    assert short.claim_tasks(worker_id="w", workloads=["x"], capacity=1, wait_seconds=1) == []


def test_cancel_jobs_posts_only_the_filters_given(client, coordinator):
    answer = {"cancelled": ["j1"], "count": 1, "more": False, "trace_id": TRACE_ID}
    coordinator.reply(200, answer)

    assert client.cancel_jobs(workload="echo", status="queued") == answer

    request = coordinator.requests[0]
    assert (request["method"], request["path"]) == ("POST", "/api/v1/jobs/cancel")
    assert request["json"] == {"workload": "echo", "status": "queued"}


def test_cancel_jobs_posts_every_filter_and_the_limit(client, coordinator):
    coordinator.reply(200, {"cancelled": [], "count": 0, "more": False, "trace_id": TRACE_ID})

    client.cancel_jobs(
        workload="echo", label="team=a", owner="bob", depends_on="j0", status="running", limit=5
    )

    assert coordinator.requests[0]["json"] == {
        "workload": "echo",
        "label": "team=a",
        "owner": "bob",
        "depends_on": "j0",
        "status": "running",
        "limit": 5,
    }


def test_a_job_watch_names_the_version_it_has_and_304_means_unchanged(client, coordinator):
    coordinator.reply(304, raw=b"", headers={"ETag": '"3.0.1.1.0.0"'})

    job, version = client.watch_job("j1", '"3.0.1.1.0.0"', wait_seconds=5)

    assert (job, version) == (None, '"3.0.1.1.0.0"')
    request = coordinator.requests[0]
    assert (request["method"], request["path"]) == ("GET", "/api/v1/jobs/j1?wait_seconds=5")
    assert request["headers"]["If-None-Match"] == '"3.0.1.1.0.0"'


def test_a_job_watch_returns_the_changed_job_with_its_new_version(client, coordinator):
    coordinator.reply(200, {"id": "j1", "status": "succeeded"}, headers={"ETag": '"4.0.0.2.0.0"'})

    job, version = client.watch_job("j1", None, wait_seconds=1)

    assert (job["status"], version) == ("succeeded", '"4.0.0.2.0.0"')
    assert "If-None-Match" not in coordinator.requests[0]["headers"]


def test_a_job_watch_waits_longer_than_the_default_timeout(coordinator):
    short = CoordinatorClient(coordinator.url, "s3cret", timeout=0.2)
    coordinator.reply(304, raw=b"", delay=0.5)
    assert short.watch_job("j1", '"1.1.0.0.0.0"', wait_seconds=1) == (None, '"1.1.0.0.0.0"')


@pytest.mark.parametrize(
    "code", ["lease_lost", "stale_attempt", "task_cancelled", "result_conflict"]
)
def test_409_on_a_task_call_is_lease_lost_with_its_code(client, coordinator, code):
    coordinator.reply(409, error_body(code))

    with pytest.raises(LeaseLost) as caught:
        client.submit_result(
            "t1", worker_id="w", attempt=1, lease_token=LEASE, result={"summary": {}, "metrics": {}}
        )

    assert caught.value.code == code
    assert caught.value.trace_id == TRACE_ID


def test_429_is_unavailable_with_retry_after(client, coordinator):
    coordinator.reply(429, error_body("rate_limited"), headers={"Retry-After": "7"})

    with pytest.raises(CoordinatorUnavailable) as caught:
        client.renew_leases(worker_id="w", heartbeats=[BEAT])

    assert caught.value.retry_after == 7
    assert caught.value.status == 429


def test_a_failure_sends_its_retry_after_only_when_it_has_one(client, coordinator):
    for _ in range(2):
        coordinator.reply(200, {"status": "pending", "trace_id": TRACE_ID})
    failure = {"worker_id": "w", "attempt": 1, "lease_token": LEASE, "error_code": "x"}
    failure["error_message"] = "y"

    client.report_failure("t1", **failure, retryable=True, retry_after_seconds=30)
    client.report_failure("t1", **failure, retryable=True)

    with_it, without = (request["json"] for request in coordinator.requests)
    assert with_it["retry_after_seconds"] == 30
    assert "retry_after_seconds" not in without


@pytest.mark.parametrize("status", [500, 502, 503])
def test_5xx_is_unavailable(client, coordinator, status):
    coordinator.reply(status, raw=b"<html>bad gateway</html>")

    with pytest.raises(CoordinatorUnavailable) as caught:
        client.report_failure(
            "t1",
            worker_id="w",
            attempt=1,
            lease_token=LEASE,
            error_code="x",
            error_message="y",
            retryable=True,
        )

    assert caught.value.status == status
    assert caught.value.retry_after is None


@pytest.mark.parametrize(
    ("status", "code"), [(507, "insufficient_storage"), (500, "storage_unavailable")]
)
def test_a_storage_failure_is_neither_unavailable_nor_rejected(client, coordinator, status, code):
    coordinator.reply(status, error_body(code, "the temp directory is out of space"))

    with pytest.raises(StorageFailed) as caught:
        client.list_jobs()

    assert not isinstance(caught.value, CoordinatorUnavailable | RequestRejected)
    assert (caught.value.status, caught.value.code, caught.value.trace_id) == (
        status,
        code,
        TRACE_ID,
    )


@pytest.mark.parametrize("code", ["storage_unavailable", "input_not_here"])
def test_an_archive_503_is_a_blip_to_retry_after_its_retry_after(client, coordinator, code):
    coordinator.reply(503, error_body(code, "try another"), headers={"Retry-After": "2"})

    with pytest.raises(CoordinatorUnavailable) as caught:
        client.stream_input("/api/v1/tasks/t1/input", worker_id="w", attempt=1, lease_token=LEASE)

    assert (caught.value.is_blip, caught.value.retry_after, caught.value.code) == (True, 2, code)


@pytest.mark.parametrize(
    ("status", "blip"), [(None, True), (429, True), (502, True), (503, True), (500, False)]
)
def test_only_no_answer_and_come_back_later_statuses_are_blips(status, blip):
    assert CoordinatorUnavailable("x", status=status).is_blip is blip


def test_other_4xx_is_rejected_with_status_code_message_and_trace_id(client, coordinator):
    coordinator.reply(401, error_body("unauthenticated", "bad token"))

    with pytest.raises(RequestRejected) as caught:
        client.claim_tasks(worker_id="w", workloads=["csv_stats"], capacity=1)

    error = caught.value
    assert (error.status, error.code, error.message, error.trace_id) == (
        401,
        "unauthenticated",
        "bad token",
        TRACE_ID,
    )
    assert error.details == {"x": 1}


def test_served_workloads_are_listed_from_the_operators_endpoint(client, coordinator):
    echo = {"workload": "echo", "paused": False, "max_queued_tasks": 100}
    coordinator.reply(200, {"workloads": [echo], "trace_id": TRACE_ID})

    listing = client.list_workloads(trace_id=TRACE_ID)

    assert listing["workloads"] == [echo]
    [request] = coordinator.requests
    assert (request["method"], request["path"]) == ("GET", "/api/v1/workloads")


def test_a_workload_is_paused_and_resumed_by_posting_its_action_without_a_body(client, coordinator):
    coordinator.reply(200, {"workload": "echo", "paused": True, "paused_by": "operator"})
    coordinator.reply(200, {"workload": "echo", "paused": False, "paused_by": None})

    paused = client.pause_workload("echo", paused=True)
    resumed = client.pause_workload("echo", paused=False)

    assert (paused["paused"], resumed["paused"]) == (True, False)
    sent = [(r["method"], r["path"], r["json"]) for r in coordinator.requests]
    assert sent == [
        ("POST", "/api/v1/workloads/echo/pause", None),
        ("POST", "/api/v1/workloads/echo/resume", None),
    ]


def test_a_workload_name_stays_one_path_segment(client, coordinator):
    coordinator.reply(404, error_body("not_found"))

    with pytest.raises(RequestRejected):
        client.pause_workload("../queue", paused=True)

    assert coordinator.requests[0]["path"] == "/api/v1/workloads/..%2Fqueue/pause"


def test_connection_refused_is_unavailable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Nothing listens on the port now.
    client = CoordinatorClient(f"http://127.0.0.1:{port}", "s3cret", timeout=1)
    with pytest.raises(CoordinatorUnavailable):
        client.renew_leases(worker_id="w", heartbeats=[BEAT])


def test_timeout_is_unavailable(coordinator):
    client = CoordinatorClient(coordinator.url, "s3cret", timeout=0.2)
    coordinator.reply(200, {"trace_id": TRACE_ID}, delay=0.6)
    with pytest.raises(CoordinatorUnavailable):
        client.renew_leases(worker_id="w", heartbeats=[BEAT])


def test_renew_leases_posts_the_batch_and_returns_each_outcome_in_order(client, coordinator):
    outcomes = [
        {"task_id": "t1", "outcome": "renewed", "status": 200, "error": None},
        {"task_id": "t2", "outcome": "rejected", "status": 409, "error": {"code": "lease_lost"}},
    ]
    coordinator.reply(200, {"results": outcomes, "trace_id": TRACE_ID})
    items = [
        {"task_id": "t1", "attempt": 1, "checkpoint": {"n": 1}},
        {"task_id": "t2", "attempt": 3},
    ]

    assert client.renew_leases(worker_id="w", heartbeats=items, trace_id=TRACE_ID) == outcomes

    [request] = coordinator.requests
    assert (request["method"], request["path"]) == ("POST", "/api/v1/tasks/heartbeats")
    assert request["json"] == {"worker_id": "w", "heartbeats": items}


def test_a_refused_item_becomes_the_exception_its_single_call_would_raise():
    refused = {"task_id": "t", "outcome": "rejected", "status": 409}
    lost = rejection_of({**refused, "error": {"code": "stale_attempt", "message": "old"}})
    missing = rejection_of({**refused, "status": 404, "error": {"code": "not_found"}})

    assert (type(lost), lost.code, lost.message) == (LeaseLost, "stale_attempt", "old")
    assert (type(missing), missing.status, missing.code) == (RequestRejected, 404, "not_found")


def test_input_streams_in_blocks_with_worker_and_attempt_and_the_token_in_a_header(
    client, coordinator
):
    data = bytes(range(256)) * 1000
    coordinator.reply(200, raw=data, headers={"Content-Type": "application/octet-stream"})

    with client.stream_input(
        "/api/v1/tasks/t1/input",
        worker_id="w",
        attempt=4,
        lease_token=LEASE,
        trace_id=TRACE_ID,
        block_size=4096,
    ) as stream:
        blocks = list(stream)

    assert b"".join(blocks) == data
    assert max(len(b) for b in blocks) <= 4096
    assert coordinator.requests[0]["path"] == "/api/v1/tasks/t1/input?worker_id=w&attempt=4"
    assert coordinator.requests[0]["headers"]["Chunkwise-Lease-Token"] == LEASE


def test_a_resumed_input_read_asks_for_a_range_and_says_where_its_bytes_begin(client, coordinator):
    coordinator.reply(206, raw=b"rest", headers={"Content-Range": "bytes 96-99/100"})

    with client.stream_input(
        "/api/v1/tasks/t1/input", worker_id="w", attempt=1, lease_token=LEASE, start=96
    ) as s:
        assert (b"".join(s), s.first_byte) == (b"rest", 96)

    assert coordinator.requests[0]["headers"]["Range"] == "bytes=96-"


def test_a_coordinator_that_ignores_the_range_gives_a_stream_from_the_first_byte(
    client, coordinator
):
    coordinator.reply(200, raw=b"everything")

    with client.stream_input(
        "/api/v1/tasks/t1/input", worker_id="w", attempt=1, lease_token=LEASE, start=5
    ) as s:
        assert (b"".join(s), s.first_byte) == (b"everything", 0)


def test_a_first_read_sends_no_range(client, coordinator):
    coordinator.reply(200, raw=b"everything")

    client.stream_input(
        "/api/v1/tasks/t1/input", worker_id="w", attempt=1, lease_token=LEASE
    ).close()

    assert "Range" not in coordinator.requests[0]["headers"]


def test_input_409_is_lease_lost(client, coordinator):
    coordinator.reply(409, error_body("lease_lost"))
    with pytest.raises(LeaseLost):
        client.stream_input("/api/v1/tasks/t1/input", worker_id="w", attempt=1, lease_token=LEASE)


def test_input_uri_on_another_host_is_refused_so_the_token_stays_home(client):
    with pytest.raises(ValueError):
        client.stream_input(
            "http://elsewhere.invalid/steal", worker_id="w", attempt=1, lease_token=LEASE
        )


def test_coordinator_url_with_a_path_prefix_is_kept(coordinator):
    client = CoordinatorClient(coordinator.url + "/chunkwise/", "s3cret")
    coordinator.reply(204)
    client.claim_tasks(worker_id="w", workloads=["x"], capacity=1)
    assert coordinator.requests[0]["path"] == "/chunkwise/api/v1/tasks/claim"


ACCEPTED = {"task_id": "t1", "outcome": "accepted", "status": 200, "error": None}


@pytest.mark.parametrize(
    ("call", "answer"),
    [
        ("claim", []),
        ("claim", {"tasks": {"task_id": "t1"}}),
        ("results", {"results": []}),
        ("results", {"results": [ACCEPTED, ACCEPTED]}),
        ("results", {"results": [None]}),
        ("results", {"results": [{**ACCEPTED, "outcome": "renewed"}]}),
        ("heartbeats", {"results": [ACCEPTED]}),
        ("heartbeats", ["renewed"]),
    ],
    ids=[
        "claim: a list",
        "claim: tasks no list",
        "results: none",
        "results: one too many",
        "results: null outcome",
        "results: a heartbeat's outcome",
        "heartbeats: a result's outcome",
        "heartbeats: a list",
    ],
)
def test_an_answer_of_the_wrong_shape_is_a_blip_to_retry_not_a_crash(
    client, coordinator, call, answer
):
    coordinator.reply(200, answer)
    calls = {
        "claim": lambda: client.claim_tasks(worker_id="w", workloads=["csv_stats"], capacity=1),
        "results": lambda: client.submit_results(worker_id="w", results=[{**BEAT}]),
        "heartbeats": lambda: client.renew_leases(worker_id="w", heartbeats=[BEAT]),
    }

    with pytest.raises(CoordinatorUnavailable) as raised:
        calls[call]()

    assert raised.value.is_blip and raised.value.status is None


def test_a_refused_item_with_a_garbled_error_still_names_its_status():
    refused = rejection_of({"outcome": "rejected", "status": 409, "error": ["stale"]})

    assert isinstance(refused, LeaseLost)
    assert (refused.status, refused.code, refused.details) == (409, None, {})


@pytest.mark.parametrize(
    ("url", "token", "problem"),
    [
        ("http://[::1", "cwu_x", "is not a URL"),
        ("http://host:port/", "cwu_x", "is not a URL"),
        ("ftp://host/", "cwu_x", "is not an http"),
        ("http:///path", "cwu_x", "is not an http"),
        ("http://host/", "cwu_\u20ac", "printable ASCII"),
        ("http://host/", "cwu_x\nInjected: 1", "printable ASCII"),
        ("http://host/", "cwu x", "printable ASCII"),
    ],
)
def test_a_url_or_token_no_request_could_carry_is_named_before_any_call(url, token, problem):
    assert problem in settings_problem(url, token)


def test_a_usable_url_and_token_have_no_problem():
    assert settings_problem("https://[::1]:8000/base/", "cwu_" + "A-z_9" * 8) is None


def test_a_claim_refused_a_place_to_wait_sleeps_its_retry_after_before_answering_none(
    coordinator,
):
    slept: list[float] = []
    client = CoordinatorClient(coordinator.url, "s3cret", sleep=slept.append)
    coordinator.reply(204, raw=b"", headers={"Retry-After": "3"})
    coordinator.reply(204, raw=b"", headers={"Retry-After": "3"})
    coordinator.reply(204, raw=b"")

    assert client.claim_tasks(worker_id="w", workloads=["x"], capacity=1, wait_seconds=10) == []
    assert client.claim_tasks(worker_id="w", workloads=["x"], capacity=1, wait_seconds=1) == []
    assert client.claim_tasks(worker_id="w", workloads=["x"], capacity=1, wait_seconds=10) == []

    # As long as asked, never longer than the poll itself would have waited; a plain 204 at once.
    assert slept == [3, 1]


def test_a_job_watch_refused_a_place_to_wait_sleeps_its_retry_after_before_answering_unchanged(
    coordinator,
):
    slept: list[float] = []
    client = CoordinatorClient(coordinator.url, "s3cret", sleep=slept.append)
    coordinator.reply(304, raw=b"", headers={"ETag": '"v1"', "Retry-After": "3"})

    assert client.watch_job("j1", '"v1"', wait_seconds=20) == (None, '"v1"')
    assert slept == [3]


@pytest.mark.parametrize(("status", "created"), [(201, True), (200, False)])
def test_a_submit_says_whether_it_created_the_job_or_found_one_under_its_key(
    client, coordinator, status, created
):
    coordinator.reply(status, {"id": "j1", "status": "failed"})

    job = client.submit_job({"workload": "echo"}, idempotency_key="k")

    assert job == {"id": "j1", "status": "failed"}
    assert job.created is created
