"""The SDK's Client over a scripted transport: what it sends, how it waits, what it raises."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from requests.adapters import BaseAdapter
from requests.structures import CaseInsensitiveDict

from worker_cli import AsyncClient, Client, JobFailed, MissingSetting, WaitTimedOut
from worker_cli.client import CoordinatorClient, RequestRejected

URL = "http://coordinator.test"
JOB_ID = "0b6f4a3c-8f07-4a52-9d7e-52c1b6a3d0aa"


class ScriptedTransport(BaseAdapter):
    """Answers each request with the next scripted (status, body, headers); records requests."""

    def __init__(self, *replies):
        super().__init__()
        self.replies = list(replies)
        self.requests: list[dict] = []
        self.closed = False

    def send(self, request, **kwargs):
        parts = urlsplit(request.url)
        self.requests.append(
            {
                "method": request.method,
                "path": parts.path,
                "query": {k: v[0] for k, v in parse_qs(parts.query).items()},
                "headers": dict(request.headers),
                "json": json.loads(request.body) if request.body else None,
            }
        )
        status, body, headers = self.replies.pop(0)
        response = requests.Response()
        response.status_code = status
        response.headers = CaseInsensitiveDict(headers)
        response._content = b"" if body is None else json.dumps(body).encode()
        response._content_consumed = True
        response.url = request.url
        response.request = request
        return response

    def close(self):
        self.closed = True


def job(status="running", **fields):
    return {"id": JOB_ID, "status": status, "error": None, **fields}


def api_over(transport, sleeps: list) -> CoordinatorClient:
    session = requests.Session()
    session.mount(URL, transport)
    return CoordinatorClient(URL, "cw_token", session=session, sleep=sleeps.append)


def client_over(transport, sleeps=None, clock=None) -> Client:
    sleeps = sleeps if sleeps is not None else []
    return Client(
        api=api_over(transport, sleeps), sleep=sleeps.append, clock=clock or (lambda: 0.0)
    )


# -- submit -------------------------------------------------------------------------------


def test_submit_sends_one_task_per_args_item_and_only_the_options_given():
    transport = ScriptedTransport((201, job("queued"), {}))
    client = client_over(transport)

    answer = client.submit("square", ({"x": i} for i in range(3)), labels={"run": "demo"})

    sent = transport.requests[0]
    assert answer["status"] == "queued"
    assert (sent["method"], sent["path"]) == ("POST", "/api/v1/jobs")
    assert sent["json"] == {
        "workload": "square",
        "tasks": [{"args": {"x": 0}}, {"args": {"x": 1}}, {"args": {"x": 2}}],
        "labels": {"run": "demo"},
    }
    assert uuid.UUID(sent["headers"]["Idempotency-Key"])
    assert sent["headers"]["Authorization"] == "Bearer cw_token"


def test_submit_passes_every_job_option_under_the_api_s_names():
    transport = ScriptedTransport((201, job("queued"), {}))
    dependency = uuid.uuid4()
    when = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)

    client_over(transport).submit(
        "square",
        [[1, 2]],
        priority=7,
        max_attempts=2,
        not_before=when,
        timeout_seconds=60,
        depends_on=[dependency],
        idempotency_key="nightly-2030-01-02",
    )

    sent = transport.requests[0]
    assert sent["json"] == {
        "workload": "square",
        "tasks": [{"args": [1, 2]}],
        "priority": 7,
        "max_attempts": 2,
        "not_before": "2030-01-02T03:04:05+00:00",
        "timeout_seconds": 60,
        "depends_on": [str(dependency)],
    }
    assert sent["headers"]["Idempotency-Key"] == "nightly-2030-01-02"


def test_a_submission_retried_after_a_blip_carries_the_same_idempotency_key():
    transport = ScriptedTransport(
        (503, {"error": {"code": "unavailable"}}, {"Retry-After": "1"}), (201, job("queued"), {})
    )
    sleeps: list[float] = []

    client_over(transport, sleeps).submit("square", [{"x": 1}])

    first, second = (r["headers"]["Idempotency-Key"] for r in transport.requests)
    assert first == second
    assert sleeps and sleeps[0] >= 1


def test_a_refused_submission_raises_the_coordinator_s_error_naming_the_field():
    error = {"code": "invalid_input", "message": "tasks.0.args: not JSON", "details": {}}
    transport = ScriptedTransport((422, {"error": error}, {}))

    with pytest.raises(RequestRejected, match=r"tasks\.0\.args"):
        client_over(transport).submit("square", [{"x": 1}])


# -- wait ---------------------------------------------------------------------------------


def test_wait_watches_until_the_job_finishes_with_its_version():
    transport = ScriptedTransport(
        (200, job("running"), {"ETag": '"v1"'}),
        (304, None, {"ETag": '"v1"'}),
        (200, job("running"), {"ETag": '"v2"'}),
        (200, job("succeeded", result={"n": 3}), {"ETag": '"v3"'}),
    )
    sleeps: list[float] = []

    finished = client_over(transport, sleeps).wait(JOB_ID)

    assert finished["result"] == {"n": 3}
    first, *watches = transport.requests
    assert first["query"] == {"wait_seconds": "0"} and "If-None-Match" not in first["headers"]
    assert [w["headers"]["If-None-Match"] for w in watches] == ['"v1"', '"v1"', '"v2"']
    # Each watch asks to be answered when the job finishes, not at each chunk's change.
    assert [w["query"] for w in watches] == [{"wait_seconds": "30.0", "until": "finished"}] * 3
    assert sleeps == []  # the coordinator did the waiting


def test_wait_honours_retry_after_on_a_304_instead_of_asking_again_at_once():
    transport = ScriptedTransport(
        (200, job("running"), {"ETag": '"v1"'}),
        (304, None, {"ETag": '"v1"', "Retry-After": "4"}),
        (200, job("succeeded"), {"ETag": '"v2"'}),
    )
    sleeps: list[float] = []

    client_over(transport, sleeps).wait(JOB_ID)

    assert sleeps == [4]


def test_wait_honours_retry_after_on_the_job_as_it_is_instead_of_asking_again_at_once():
    transport = ScriptedTransport(
        (200, job("running"), {"ETag": '"v1"'}),
        (200, job("running"), {"ETag": '"v2"', "Retry-After": "3"}),
        (200, job("succeeded"), {"ETag": '"v3"'}),
    )
    sleeps: list[float] = []

    client_over(transport, sleeps).wait(JOB_ID)

    assert sleeps == [3]


def test_wait_raises_job_failed_carrying_the_job_s_error():
    error = {"code": "task_failed", "message": "chunk 3: ValueError: x must be positive"}
    transport = ScriptedTransport((200, job("failed", error=error), {"ETag": '"v9"'}))

    with pytest.raises(JobFailed) as raised:
        client_over(transport).wait(JOB_ID)

    assert raised.value.error == error
    assert raised.value.job["status"] == "failed"
    assert "x must be positive" in str(raised.value)


def test_wait_raises_job_failed_for_a_cancelled_job():
    transport = ScriptedTransport((200, job("cancelled"), {"ETag": '"v9"'}))

    with pytest.raises(JobFailed, match="cancelled") as raised:
        client_over(transport).wait(JOB_ID)

    assert raised.value.status == "cancelled"


def test_wait_asks_no_longer_than_its_timeout_and_then_raises_wait_timed_out():
    times = iter([0.0, 0.0, 8.0])  # when the wait starts, watches, and finds the job unchanged
    transport = ScriptedTransport(
        (200, job("running"), {"ETag": '"v1"'}),
        (304, None, {"ETag": '"v1"'}),
    )

    with pytest.raises(WaitTimedOut) as raised:
        client_over(transport, clock=lambda: next(times)).wait(JOB_ID, timeout=7.5)

    assert transport.requests[1]["query"]["wait_seconds"] == "7.5"
    assert len(transport.requests) == 2
    assert raised.value.job["status"] == "running"


# -- results ------------------------------------------------------------------------------


def test_results_pages_through_the_values_in_chunk_order():
    def page(values, first, next_after):
        items = [
            {"chunk_index": first + i, "task_id": str(uuid.uuid4()), "value": v}
            for i, v in enumerate(values)
        ]
        return (200, {"results": items, "next_after": next_after}, {})

    transport = ScriptedTransport(page([0, 1, 4], 0, 2), page([9, None], 3, 4), page([], 5, None))

    assert client_over(transport).results(JOB_ID) == [0, 1, 4, 9, None]
    assert [r["query"] for r in transport.requests] == [
        {"limit": "10000"},
        {"limit": "10000", "after": "2"},
        {"limit": "10000", "after": "4"},
    ]


def test_results_stop_at_a_page_whose_next_after_is_null():
    transport = ScriptedTransport(
        (200, {"results": [{"chunk_index": 0, "task_id": "t", "value": 1}], "next_after": None}, {})
    )

    assert client_over(transport).results(JOB_ID) == [1]
    assert len(transport.requests) == 1


def test_results_leave_out_tasks_whose_result_is_stored_elsewhere():
    stored = {"chunk_index": 0, "task_id": "t0", "value": {"n": 1}}
    # The /results page leaves `value` out of a manifest-only item (ResultManifestSchema).
    elsewhere = {"chunk_index": 1, "task_id": "t1", "result_uri": "s3://b/k", "result_sha256": "0"}
    transport = ScriptedTransport(
        (200, {"results": [stored, elsewhere], "next_after": None}, {}),
    )

    assert client_over(transport).results(JOB_ID) == [{"n": 1}]


def test_results_follow_a_full_page_to_the_empty_one_that_ends_the_job():
    transport = ScriptedTransport(
        (200, {"results": [{"chunk_index": 0, "task_id": "t", "value": 1}], "next_after": 0}, {}),
        (200, {"results": [], "next_after": None}, {}),
    )

    assert client_over(transport).results(JOB_ID) == [1]
    assert [r["query"].get("after") for r in transport.requests] == [None, "0"]


# -- closing ------------------------------------------------------------------------------


def test_a_client_used_as_a_context_manager_closes_its_connections_on_leaving():
    transport = ScriptedTransport((200, job("succeeded"), {}))

    with client_over(transport) as client:
        client.job(JOB_ID)
        assert not transport.closed
    assert transport.closed


def test_a_client_used_as_a_context_manager_closes_its_connections_when_a_call_raises():
    transport = ScriptedTransport((404, {"error": {"code": "not_found", "message": "no"}}, {}))

    with pytest.raises(RequestRejected), client_over(transport) as client:
        client.job(JOB_ID)
    assert transport.closed


# -- settings -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environment", "missing"),
    [({}, "CHUNKWISE_URL"), ({"CHUNKWISE_URL": URL}, "CHUNKWISE_TOKEN")],
)
def test_a_client_without_its_settings_raises_missing_setting_naming_the_variable(
    monkeypatch, environment, missing
):
    for name in ("CHUNKWISE_URL", "CHUNKWISE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)

    with pytest.raises(MissingSetting) as raised:
        Client()

    assert raised.value.variable == missing
    assert str(raised.value).startswith(f"{missing} is not set") and "\n" not in str(raised.value)


def test_a_client_reads_its_url_and_token_from_the_environment(monkeypatch):
    monkeypatch.setenv("CHUNKWISE_URL", URL)
    monkeypatch.setenv("CHUNKWISE_TOKEN", "cw_from_env")

    client = Client()

    assert client.api.base_url == URL + "/"
    assert client.api.session.headers["Authorization"] == "Bearer cw_from_env"


def test_arguments_win_over_the_environment(monkeypatch):
    monkeypatch.setenv("CHUNKWISE_URL", "http://elsewhere.test")
    monkeypatch.setenv("CHUNKWISE_TOKEN", "cw_from_env")

    client = Client(URL, "cw_given")

    assert client.api.base_url == URL + "/"
    assert client.api.session.headers["Authorization"] == "Bearer cw_given"


# -- asyncio ------------------------------------------------------------------------------


def test_the_async_client_runs_the_client_s_calls_off_the_event_loop():
    transport = ScriptedTransport(
        (201, job("queued"), {}),
        (200, job("succeeded"), {"ETag": '"v2"'}),
        (
            200,
            {"results": [{"chunk_index": 0, "task_id": "t", "value": 4}], "next_after": None},
            {},
        ),
    )
    sleeps: list[float] = []
    aclient = AsyncClient(api=api_over(transport, sleeps), sleep=sleeps.append)

    async def ten_lines():
        submitted = await aclient.submit("square", [{"x": 2}])
        await aclient.wait(submitted["id"], timeout=5)
        return await aclient.results(submitted["id"])

    assert asyncio.run(ten_lines()) == [4]
