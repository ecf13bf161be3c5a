"""Exit statuses: 0 ok, 1 unsuccessful job, 3 HTTP error, 4 no coordinator; retries first."""

from __future__ import annotations

import io
import json

import pytest

from worker_cli.chunkwise import run
from worker_cli.client import CoordinatorUnavailable, LeaseLost, RequestRejected, StorageFailed
from worker_cli.commands.invocation import (
    EXIT_HTTP_ERROR,
    EXIT_JOB_UNSUCCESSFUL,
    EXIT_OK,
    EXIT_UNREACHABLE,
    RETRY_DELAYS,
    Invocation,
    exit_status_for,
)
from worker_cli.commands.jobs import RecordsDone

JOB_ID = "6e56eaf5-06ec-450f-a4f0-f652955b2d63"
ENV = {"CHUNKWISE_URL": "http://c.test", "CHUNKWISE_TOKEN": "cwu_t"}
FORBIDDEN = RequestRejected(
    "this view is for operators",
    status=403,
    code="forbidden",
    trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
)
DB_DOWN = CoordinatorUnavailable(
    "the database is unavailable", status=503, code="unavailable", retry_after=2.0, trace_id="t503"
)
REFUSED = CoordinatorUnavailable("GET /api/v1/jobs: connection refused")
PAUSE = {"paused_by": "operator", "paused_at": "2026-12-05T11:00:00+00:00"}


def job(status: str, **fields) -> dict:
    return {
        "id": JOB_ID,
        "workload": "csv_stats",
        "status": status,
        "progress": 0.5,
        "chunks_completed": 1,
        "chunks_total": 2,
        "chunks_by_state": {},
        "priority": 0,
        "parameters": {},
        "labels": {},
        "trace_id": "f" * 32,
        **fields,
    }


class ScriptedClient:
    """Answers each call with the next scripted reply (a document, or an exception to raise)."""

    replies: list = []
    calls: list[str] = []
    watched: list[tuple] = []
    cancel_requests: list[dict] = []

    def __init__(self, url, token):
        pass

    def _next(self, name):
        ScriptedClient.calls.append(name)
        reply = ScriptedClient.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def get_job(self, job_id, *, trace_id):
        return self._next("get_job")

    def watch_job(self, job_id, version, *, wait_seconds, until_finished, trace_id):
        ScriptedClient.watched.append((version, wait_seconds, until_finished))
        return self._next("watch_job")

    def list_chunks(self, job_id, *, trace_id):
        return self._next("list_chunks")

    def retry_job(self, job_id, *, trace_id):
        return self._next("retry_job")

    def cancel_jobs(self, *, trace_id, **request):
        ScriptedClient.cancel_requests.append(request)
        return self._next("cancel_jobs")

    def queue_status(self, *, trace_id):
        return self._next("queue_status")

    def list_workloads(self, *, trace_id):
        return self._next("list_workloads")

    def pause_workload(self, workload, *, paused, trace_id):
        return self._next("pause_workload")

    def submit_csv_job(self, file, *, trace_id, **form):
        return self._next("submit_csv_job")

    def close(self):
        pass


def run_scripted(argv, replies):
    ScriptedClient.replies, ScriptedClient.calls, ScriptedClient.watched = list(replies), [], []
    ScriptedClient.cancel_requests = []
    out, err, slept = io.StringIO(), io.StringIO(), []
    status = run(
        argv, client_factory=ScriptedClient, out=out, err=err, environ=ENV, sleep=slept.append
    )
    return status, out.getvalue(), err.getvalue(), slept


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("queued", EXIT_OK),
        ("running", EXIT_OK),
        ("succeeded", EXIT_OK),
        ("failed", EXIT_JOB_UNSUCCESSFUL),
        ("cancelled", EXIT_JOB_UNSUCCESSFUL),
    ],
)
def test_status_exits_1_only_for_a_failed_or_cancelled_job(status, expected):
    assert run_scripted(["status", JOB_ID], [job(status)])[0] == expected


def test_a_failed_jobs_error_and_partial_result_go_to_stderr():
    failed = job(
        "failed",
        error={"code": "invalid_input", "message": "record 10 is bad"},
        partial_result={"count": 1, "sum": 2, "min": 2, "max": 2},
    )
    status, out, err, _ = run_scripted(["result", JOB_ID], [failed])
    assert status == EXIT_JOB_UNSUCCESSFUL
    assert out == ""
    assert f"job {JOB_ID} failed: invalid_input: record 10 is bad" in err
    assert '"count": 1' in err and "f" * 32 in err


def test_result_of_an_unfinished_job_exits_1_saying_so():
    status, out, err, _ = run_scripted(["result", JOB_ID], [job("running")])
    assert (status, out) == (EXIT_JOB_UNSUCCESSFUL, "")
    assert "no result yet: it is running (50%)" in err


def test_result_of_a_succeeded_job_prints_it_and_exits_0():
    done = job("succeeded", result={"count": 2, "sum": 3, "min": 1, "max": 2})
    status, out, _, _ = run_scripted(["result", JOB_ID], [done])
    assert status == EXIT_OK
    assert out.splitlines() == ["count  2", "sum    3", "min    1", "max    2"]


def test_watch_waits_on_the_jobs_version_until_it_finishes_and_exits_by_its_outcome():
    replies = [
        job("queued", chunks_completed=0),
        (job("running", chunks_completed=0), '"v2"'),
        (None, '"v2"'),
        (job("cancelled", chunks_completed=0), '"v3"'),
    ]
    status, _, err, slept = run_scripted(["status", JOB_ID, "--watch"], replies)
    assert status == EXIT_JOB_UNSUCCESSFUL
    assert ScriptedClient.calls == ["get_job"] + ["watch_job"] * 3
    # The coordinator does the waiting: each watch names the version last seen.
    assert ScriptedClient.watched == [(None, 1.0, True), ('"v2"', 1.0, True), ('"v2"', 1.0, True)]
    assert slept == []
    assert "was cancelled" in err


def test_watch_counts_records_from_chunks_only_when_a_chunk_completed():
    params = {"records": 10}
    chunks = {
        "chunks": [
            {"state": "completed", "record_start": 0, "record_end": 6},
            {"state": "leased", "record_start": 6, "record_end": 10},
        ]
    }
    replies = [
        job("running", parameters=params, chunks_completed=1),
        chunks,
        (job("running", parameters=params, chunks_completed=1), '"v2"'),
        (job("succeeded", parameters=params, chunks_completed=2), '"v3"'),
        {"chunks": [{**c, "state": "completed"} for c in chunks["chunks"]]},
    ]
    status, _, err, _ = run_scripted(["status", JOB_ID, "--watch"], replies)
    assert status == EXIT_OK
    # A job whose every chunk completed holds every record: no list is needed to say so.
    assert ScriptedClient.calls == ["get_job", "list_chunks", "watch_job", "watch_job"]
    assert "6/10 records" in err and "10/10 records" in err


class ChunkLister:
    """A client whose chunk list says `done` of 8 chunks of 100 records completed."""

    def __init__(self):
        self.done, self.lists = 0, 0

    def list_chunks(self, job_id, *, trace_id):
        self.lists += 1
        states = ["completed"] * self.done + ["leased"] * (8 - self.done)
        return {
            "chunks": [
                {"state": s, "record_start": 100 * i, "record_end": 100 * (i + 1)}
                for i, s in enumerate(states)
            ]
        }


def counting_records(times: list[float]) -> tuple[RecordsDone, ChunkLister]:
    lister = ChunkLister()
    cli = Invocation(lister, io.StringIO(), io.StringIO(), False, clock=iter(times).__next__)
    return RecordsDone(cli, 800), lister


def running(done: int, status: str = "running") -> dict:
    return job(status, chunks_completed=done, chunks_total=8)


def test_records_done_lists_the_chunks_at_most_once_a_second_while_the_job_runs():
    # The clock as each step reads it: the first list, three checks, the fourth's list.
    records, lister = counting_records([0.0, 0.4, 0.8, 1.5, 1.5])
    seen = []
    for done, at in ((1, "first"), (2, "0.4 s on"), (3, "0.8 s on"), (4, "1.5 s on")):
        lister.done = done
        seen.append((at, records.of(running(done)), lister.lists))

    # Chunks 2 and 3 complete within a second of the first list: the count lags until 1 s.
    assert seen == [
        ("first", 100, 1),
        ("0.4 s on", 100, 1),
        ("0.8 s on", 100, 1),
        ("1.5 s on", 400, 2),
    ]


def test_records_done_needs_no_list_when_no_chunk_or_every_chunk_has_completed():
    records, lister = counting_records([])

    assert records.of(running(0)) == 0
    assert records.of(running(8, "merging")) == 800
    assert lister.lists == 0


def test_records_done_of_a_finished_job_are_listed_however_recent_the_last_list():
    records, lister = counting_records([0.0, 0.1, 0.1])
    lister.done = 1
    records.of(running(1))
    lister.done = 3

    assert records.of(running(3, "failed")) == 300
    assert lister.lists == 2


def test_a_4xx_exits_3_with_code_message_and_trace_id_on_stderr():
    status, out, err, slept = run_scripted(["queue"], [FORBIDDEN])
    assert (status, out, slept) == (EXIT_HTTP_ERROR, "", [])
    assert err.strip() == (
        "chunkwise: forbidden: this view is for operators (HTTP 403) "
        "(trace id 4bf92f3577b34da6a3ce929d0e0e4736)"
    )


def test_field_errors_are_listed_under_the_message():
    invalid = RequestRejected(
        "invalid fields: chunks",
        status=422,
        code="invalid_input",
        details={"fields": {"chunks": ["must be between 1 and 64"]}},
    )
    _, _, err, _ = run_scripted(["queue"], [invalid])
    assert err.splitlines()[1] == "  chunks: must be between 1 and 64"


def test_field_errors_not_keyed_by_field_do_not_hide_the_message():
    invalid = RequestRejected(
        "invalid fields", status=422, code="invalid_input", details={"fields": ["chunks"]}
    )
    status, _, err, _ = run_scripted(["queue"], [invalid])
    assert status == EXIT_HTTP_ERROR
    assert err.splitlines()[0].startswith("chunkwise: invalid_input: invalid fields (HTTP 422)")


@pytest.mark.parametrize(
    "command", [["status", JOB_ID], ["queue"], ["workloads"], ["pause-workload", "echo"]]
)
def test_an_answer_without_the_documented_fields_exits_3_saying_so(command):
    status, out, err, _ = run_scripted(command, [{"unexpected": True}])
    assert status == EXIT_HTTP_ERROR
    assert "not the documented one" in err and "Traceback" not in err


def test_a_5xx_is_retried_then_exits_3():
    status, _, err, slept = run_scripted(["queue"], [DB_DOWN] * (len(RETRY_DELAYS) + 1))
    assert status == EXIT_HTTP_ERROR
    assert slept == [2.0] * len(RETRY_DELAYS)  # Retry-After honoured
    assert "unavailable: the database is unavailable (HTTP 503) (trace id t503)" in err


def test_a_5xx_that_clears_up_is_not_an_error():
    status, _, _, slept = run_scripted(
        ["queue"],
        [
            DB_DOWN,
            {
                "chunks": [],
                "active_leases": 0,
                "max_leases_total": 8,
                "max_leases_per_worker": 2,
                "max_queued_chunks": 256,
            },
        ],
    )
    assert status == EXIT_OK and slept == [2.0]


def test_an_unreachable_coordinator_is_retried_then_exits_4():
    status, _, err, slept = run_scripted(["status", JOB_ID], [REFUSED] * (len(RETRY_DELAYS) + 1))
    assert status == EXIT_UNREACHABLE
    assert slept == list(RETRY_DELAYS)
    assert err.startswith("chunkwise: coordinator unreachable at http://c.test:")
    assert "trace id " in err  # the CLI's own trace id: every call of the run carried it


@pytest.mark.parametrize(
    ("status", "code"), [(507, "insufficient_storage"), (500, "storage_unavailable")]
)
def test_an_upload_the_coordinator_cannot_store_is_not_sent_again(tmp_path, status, code):
    csv_file = tmp_path / "data.csv"
    csv_file.write_text("id,value\n1,2\n")
    no_room = StorageFailed(
        "the temp directory is out of space (ENOSPC)", status=status, code=code, trace_id="t507"
    )

    exit_status, _, err, slept = run_scripted(
        ["submit", str(csv_file), "--column", "value"], [no_room, job("queued")]
    )

    assert (exit_status, slept, ScriptedClient.calls) == (EXIT_HTTP_ERROR, [], ["submit_csv_job"])
    assert f"{code}: the temp directory is out of space (ENOSPC) (HTTP {status})" in err


def test_retry_is_sent_once_even_when_the_answer_is_lost():
    status, _, _, slept = run_scripted(["retry", JOB_ID], [REFUSED, job("running")])
    assert (status, slept, ScriptedClient.calls) == (EXIT_UNREACHABLE, [], ["retry_job"])


@pytest.mark.parametrize(
    "command", [["workloads"], ["pause-workload", "echo"], ["resume-workload", "echo"]]
)
def test_a_workload_command_refused_to_a_non_operator_exits_3(command):
    status, out, err, _ = run_scripted(command, [FORBIDDEN])
    assert (status, out) == (EXIT_HTTP_ERROR, "")
    assert "forbidden: this view is for operators (HTTP 403)" in err


@pytest.mark.parametrize("command", ["pause-workload", "resume-workload"])
def test_a_workload_the_coordinator_does_not_serve_exits_3_saying_not_found(command):
    not_served = RequestRejected("workload nope is not served here", status=404, code="not_found")
    status, _, err, slept = run_scripted([command, "nope"], [not_served])
    assert (status, slept, ScriptedClient.calls) == (EXIT_HTTP_ERROR, [], ["pause_workload"])
    assert "not_found: workload nope is not served here (HTTP 404)" in err


@pytest.mark.parametrize(
    ("command", "answer"),
    [
        ("pause-workload", {"workload": "echo", "paused": True, **PAUSE}),
        ("resume-workload", {"workload": "echo", "paused": False}),
    ],
)
def test_a_workload_pause_or_resume_whose_answer_was_lost_is_sent_again(command, answer):
    status, out, _, slept = run_scripted([command, "echo"], [REFUSED, answer])
    assert (status, slept) == (EXIT_OK, [RETRY_DELAYS[0]])
    assert ScriptedClient.calls == ["pause_workload", "pause_workload"]
    assert out.startswith("workload echo is ")


def cancelled(*ids: str, more: bool) -> dict:
    return {"cancelled": list(ids), "count": len(ids), "more": more, "trace_id": "t"}


def test_cancel_jobs_asks_again_while_more_remain_and_prints_one_total():
    replies = [
        cancelled("a", "b", more=True),
        cancelled("c", "d", more=True),
        cancelled("e", more=False),
    ]

    status, out, _, _ = run_scripted(["cancel-jobs", "--workload", "echo", "--limit", "2"], replies)

    assert (status, out) == (EXIT_OK, "cancelled 5 jobs\n")
    assert ScriptedClient.cancel_requests == [{"workload": "echo", "limit": 2}] * 3


def test_cancel_jobs_in_json_is_one_document_of_every_id_cancelled():
    replies = [cancelled("a", more=True), cancelled("b", more=False)]

    status, out, _, _ = run_scripted(["cancel-jobs", "--status", "queued", "--json"], replies)

    assert status == EXIT_OK
    assert json.loads(out) == {"cancelled": ["a", "b"], "count": 2}


def test_cancel_jobs_sends_every_filter_given_and_no_limit_unless_asked():
    argv = ["cancel-jobs", "--label", "team=a", "--owner", "bob", "--depends-on", JOB_ID]

    run_scripted(argv, [cancelled(more=False)])

    assert ScriptedClient.cancel_requests == [
        {"label": "team=a", "owner": "bob", "depends_on": JOB_ID, "limit": None}
    ]


def test_cancel_jobs_stops_when_a_batch_cancels_nothing_though_more_remain():
    status, out, _, _ = run_scripted(["cancel-jobs", "--workload", "echo"], [cancelled(more=True)])
    assert (status, out, ScriptedClient.calls) == (EXIT_OK, "cancelled 0 jobs\n", ["cancel_jobs"])


def test_cancel_jobs_whose_answer_was_lost_is_sent_again():
    replies = [REFUSED, cancelled("a", more=False)]

    status, out, _, slept = run_scripted(["cancel-jobs", "--workload", "echo"], replies)

    assert (status, out, slept) == (EXIT_OK, "cancelled 1 job\n", [RETRY_DELAYS[0]])
    assert ScriptedClient.calls == ["cancel_jobs", "cancel_jobs"]


def test_cancel_jobs_refused_as_invalid_exits_3_naming_the_field():
    invalid = RequestRejected(
        "invalid fields: limit",
        status=422,
        code="invalid_input",
        details={"fields": {"limit": ["must be between 1 and 1000"]}},
    )

    status, out, err, slept = run_scripted(
        ["cancel-jobs", "--workload", "echo", "--limit", "0"], [invalid]
    )

    assert (status, out, slept) == (EXIT_HTTP_ERROR, "", [])
    assert err.splitlines()[1] == "  limit: must be between 1 and 1000"


def test_exit_status_mapping():
    assert exit_status_for(FORBIDDEN) == EXIT_HTTP_ERROR
    assert exit_status_for(DB_DOWN) == EXIT_HTTP_ERROR
    assert exit_status_for(LeaseLost("stale", status=409)) == EXIT_HTTP_ERROR
    assert exit_status_for(REFUSED) == EXIT_UNREACHABLE
