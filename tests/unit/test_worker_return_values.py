"""What a handler's return value becomes (issue 39): every one ends in a result or a reported
failure, never in a crashed chunk thread and a task left to wait out its lease."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.unit.fakes import FakeClient, FakeClock, make_worker, read_all, task_payload
from tests.unit.fakes import wait_until_idle as idle
from worker_cli.client import RequestRejected
from worker_cli.handlers import ClaimedTask, InputUnavailable, TaskContext
from worker_cli.return_values import ResultRefused, result_body

ARGS = '{"x":3,"y":[1,2]}'  # canonical, as the coordinator sends it


def args_payload(text: str = ARGS, *, sha256: str | None = None, max_result_bytes=1024) -> dict:
    """A claimed task whose input is its args, as the claim response gives it."""
    return {
        **task_payload("t1"),
        "input_uri": "inline:t1",
        "input_sha256": sha256 or hashlib.sha256(text.encode()).hexdigest(),
        "args": text,
        "max_result_bytes": max_result_bytes,
    }


def outcome(handler, payload: dict | None = None) -> tuple[list[dict], list[dict]]:
    """Run one chunk through the worker; return (results sent, failures reported)."""
    clock = FakeClock()
    client = FakeClient(clock, claims=[[payload or args_payload()]])
    worker = make_worker(client, clock, handler, capacity=1)
    worker.run_once()
    assert idle(worker)
    return client.results, client.failures


def returning(value):
    return lambda task, context: value


class Opaque:
    """Something with no JSON form."""


@pytest.mark.parametrize(
    "value",
    [9, None, [1, "two", None], {"answer": 42, "nested": {"a": [1]}}, "text", 2.5, False],
    ids=repr,
)
def test_any_json_return_value_is_sent_as_the_value_to_store(value):
    results, failures = outcome(returning(value))

    [sent] = results
    assert failures == []
    assert sent["result"]["value"] == value
    assert set(sent["result"]) == {"value", "metrics"}


def test_a_dict_of_result_uri_and_result_sha256_is_still_a_manifest_of_a_result_stored_elsewhere():
    manifest = {"result_uri": "s3://out/1", "result_sha256": "a" * 64, "metrics": {"rows": 3}}

    [sent], _ = outcome(returning(manifest))

    assert sent["result"]["result_uri"] == "s3://out/1" and "value" not in sent["result"]
    assert sent["result"]["metrics"]["rows"] == 3


def test_a_dict_with_more_than_a_manifests_keys_is_a_value():
    returned = {"result_uri": "s3://out/1", "result_sha256": "a" * 64, "rows": 3}

    [sent], _ = outcome(returning(returned))

    assert sent["result"]["value"] == returned


def test_a_summary_is_still_sent_as_the_csv_summary():
    payload = task_payload("t1")
    clock = FakeClock()
    client = FakeClient(clock, claims=[[payload]], inputs={payload["input_uri"]: b"a,b\n1,2\n"})
    worker = make_worker(client, clock, read_all, capacity=1)
    worker.run_once()
    assert idle(worker)

    assert client.results[0]["result"]["summary"] == {"length": 8}


@pytest.mark.parametrize(
    "value",
    [{1, 2}, Opaque(), float("nan"), {"k": b"bytes"}, "\ud800"],
    ids=["a set", "an object", "NaN", "bytes", "a lone surrogate"],
)
def test_a_value_with_no_json_form_is_a_result_not_json_failure_not_retried(value):
    results, [failure] = outcome(returning(value))

    assert results == []
    assert (failure["error_code"], failure["retryable"]) == ("result_not_json", False)
    assert "not JSON" in failure["error_message"]


def test_a_string_holding_a_nul_is_not_json_the_coordinator_could_store():
    _, [failure] = outcome(returning({"k": "a\x00b"}))

    assert failure["error_code"] == "result_not_json"


def test_an_escaped_backslash_before_u0000_is_no_nul():
    assert result_body("\\u0000", None) == {"value": "\\u0000"}


def test_a_value_over_the_claims_max_result_bytes_is_a_result_too_large_failure():
    results, [failure] = outcome(returning("x" * 2000), args_payload(max_result_bytes=1024))

    assert results == []
    assert (failure["error_code"], failure["retryable"]) == ("result_too_large", False)
    assert failure["details"] == {"size": 2002, "limit": 1024}


def test_a_value_the_coordinator_finds_too_large_is_a_result_too_large_failure_not_retried():
    clock = FakeClock()
    client = FakeClient(clock, claims=[[args_payload(max_result_bytes=None)]])
    details = {"limit": 10, "size": 12, "fields": {"value": ["too large"]}}
    client.result_replies = [
        RequestRejected("value: too large", status=422, code="result_too_large", details=details)
    ]
    worker = make_worker(client, clock, returning("x" * 10), capacity=1)
    worker.run_once()
    assert idle(worker)

    [failure] = client.failures
    assert (failure["error_code"], failure["retryable"]) == ("result_too_large", False)
    assert failure["details"]["limit"] == 10


def test_the_size_counted_is_utf8_bytes_of_compact_json():
    with pytest.raises(ResultRefused):
        result_body({"k": "é" * 5}, 16)  # {"k":"ééééé"} is 18 bytes, 13 characters
    assert result_body({"k": "é" * 4}, 16) == {"value": {"k": "éééé"}}


def test_an_exception_is_a_retryable_worker_error_with_its_traceback():
    def broken(task, context):
        raise KeyError("missing")

    results, [failure] = outcome(broken)

    assert results == []
    assert (failure["error_code"], failure["retryable"]) == ("worker_error", True)
    assert (
        "KeyError" in failure["details"]["traceback"]
        and "broken" in failure["details"]["traceback"]
    )


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit], ids=lambda e: e.__name__)
def test_a_keyboard_interrupt_or_exit_in_the_handler_is_reported_not_lost(error):
    def interrupted(task, context):
        raise error()

    results, [failure] = outcome(interrupted)

    assert results == []
    assert failure["error_code"] == "worker_error"
    assert failure["error_message"].startswith(error.__name__)
    assert error.__name__ in failure["details"]["traceback"]


# -- args ---------------------------------------------------------------------------------------


def test_the_handler_gets_the_parsed_args_with_no_input_read():
    clock = FakeClock()
    client = FakeClient(clock, claims=[[args_payload()]])
    worker = make_worker(client, clock, lambda task, context: context.args["x"] ** 2, capacity=1)
    worker.run_once()
    assert idle(worker)

    assert client.results[0]["result"]["value"] == 9
    assert client.input_reads == []


def test_reading_an_args_tasks_input_gives_the_args_bytes():
    results, _ = outcome(lambda task, context: b"".join(context.read_input()).decode())

    assert results[0]["result"]["value"] == ARGS


def test_args_that_do_not_match_input_sha256_are_a_retryable_input_unavailable():
    payload = args_payload(sha256="0" * 64)

    results, [failure] = outcome(lambda task, context: context.args, payload)

    assert results == []
    assert (failure["error_code"], failure["retryable"]) == ("input_unavailable", True)


def test_a_task_without_args_has_none():
    task = ClaimedTask.from_payload(task_payload("t1"))
    context = TaskContext(task, open_input=lambda: [])

    assert task.args is None and context.args is None and task.max_result_bytes is None


def test_args_are_parsed_from_the_exact_text_that_was_checked():
    text = json.dumps({"é": 1}, ensure_ascii=False, separators=(",", ":"))
    task = ClaimedTask.from_payload(args_payload(text))
    context = TaskContext(task, open_input=lambda: [])

    assert context.args == {"é": 1}
    mismatched = ClaimedTask.from_payload(args_payload(text, sha256="f" * 64))
    with pytest.raises(InputUnavailable):
        _ = TaskContext(mismatched, open_input=list).args
