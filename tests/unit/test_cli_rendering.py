"""Human tables, key/value blocks, the progress display, and --json output of every command."""

from __future__ import annotations

import io
import json
import re
from datetime import UTC, datetime

import pytest

from worker_cli import tables
from worker_cli.chunkwise import run

JOB_ID = "6e56eaf5-06ec-450f-a4f0-f652955b2d63"
CHUNK_ID = "0e27fd39-1551-5927-8941-32217a302ae9"
RESULT = {"count": 19392, "sum": -4137222543941, "min": -999662326938, "max": 997300970849}


def job(**overrides) -> dict:
    base = {
        "id": JOB_ID,
        "workload": "csv_stats",
        "owner": "compute_user",
        "status": "running",
        "revision": 3,
        "parameters": {
            "column": "value",
            "delimiter": ",",
            "chunks": 4,
            "column_index": 2,
            "records": 20000,
        },
        "labels": {"team": "a"},
        "priority": 0,
        "chunks_total": 4,
        "chunks_completed": 2,
        "chunks_by_state": {"pending": 1, "leased": 1, "completed": 2, "failed": 0, "cancelled": 0},
        "progress": 0.4,
        "result": None,
        "partial_result": None,
        "error": None,
        "input_digest": "sha256:" + "a" * 64,
        "created_at": "2026-01-02T03:04:05.123+00:00",
        "started_at": "2026-01-02T03:04:06+00:00",
        "completed_at": None,
        "trace_id": "f" * 32,
    }
    return {**base, **overrides}


def chunk(index: int, state: str = "completed", **overrides) -> dict:
    base = {
        "id": CHUNK_ID,
        "index": index,
        "record_start": index * 5000,
        "record_end": (index + 1) * 5000,
        "state": state,
        "attempt": 1,
        "max_attempts": 3,
        "lease_owner": None,
        "lease_expires_at": None,
        "input_sha256": "b" * 64,
        "summary": None,
        "metrics": None,
        "checkpoint": None,
        "error": None,
        "attempts": [
            {
                "attempt_id": "x",
                "attempt": 1,
                "worker_id": "worker-1",
                "state": "completed",
                "trace_id": "e" * 32,
                "started_at": "2026-01-02T03:04:06+00:00",
                "finished_at": "2026-01-02T03:04:07+00:00",
                "error": None,
            }
        ],
    }
    return {**base, **overrides}


QUEUE = {
    "chunks": [
        {"workload": "csv_stats", "state": "pending", "count": 3},
        {"workload": "csv_stats", "state": "leased", "count": 2},
        {"workload": "render", "state": "completed", "count": 11},
    ],
    "jobs_by_status": {"running": 2},
    "oldest_pending_seconds": 75.5,
    "active_leases": 2,
    "oldest_lease_seconds": 1.25,
    "max_leases_total": 8,
    "max_leases_per_worker": 2,
    "max_queued_chunks": 256,
    "waiting": {"render": 4, "csv_stats": 1},
    "schedules": {"active": 3, "paused": 1, "failing": 1, "lag_seconds": 125.0},
}
WORKERS = {
    "workers": [
        {
            "worker_id": "worker-1",
            "first_seen_at": "2026-01-02T03:00:00+00:00",
            "last_seen_at": "2026-01-02T03:04:03+00:00",
            "capacity": 2,
            "workloads": ["csv_stats"],
            "leases_held": 1,
            "lease_limit": 2,
            "tasks_done": 12,
            "peak_rss_bytes": 57_671_680,
        }
    ]
}
PAUSE = {"paused_by": "operator", "paused_at": "2026-12-05T11:00:00.123456+00:00"}
RUNNING = {"paused": False, "paused_by": None, "paused_at": None}
WORKLOADS = {
    "workloads": [
        {
            "workload": "csv_stats",
            **RUNNING,
            "max_leases_per_worker": None,
            "max_leases_total": None,
            "max_queued_tasks": 256,
            "max_tasks_per_job": 64,
            "max_starts_per_second": None,
        },
        {
            "workload": "echo",
            "paused": True,
            **PAUSE,
            "max_leases_per_worker": 1,
            "max_leases_total": 4,
            "max_queued_tasks": 100,
            "max_tasks_per_job": 10,
            "max_starts_per_second": 2.5,
        },
    ]
}
EVENT = {
    "id": 42,
    "job_id": JOB_ID,
    "event": "job.succeeded",
    "payload": {"result": RESULT},
    "trace_id": "f" * 32,
    "created_at": "2026-01-02T03:04:07+00:00",
}


def test_tables_align_columns_and_right_align_numbers():
    text = tables.render_table(["NAME", "N"], [["a", 5], ["longer", 123]])
    assert text.splitlines() == ["NAME      N", "a         5", "longer  123"]


def test_an_empty_table_is_just_its_header():
    assert tables.render_table(["ID", "STATUS"], []) == "ID  STATUS"


def test_pairs_line_up_and_leave_out_missing_values():
    assert tables.render_pairs([("job", "j"), ("completed", None), ("trace id", "t")]) == (
        "job       j\ntrace id  t"
    )


def test_result_block_prints_exact_integers_in_a_fixed_order():
    assert tables.result_block({"max": 9, "min": -(2**63), "sum": 2**63 - 1, "count": 3}) == (
        f"count  3\nsum    {2**63 - 1}\nmin    {-(2**63)}\nmax    9"
    )


def test_result_block_shows_an_empty_columns_missing_min_and_max():
    assert tables.result_block({"count": 0, "sum": 0, "min": None, "max": None}).splitlines()[
        2:
    ] == ["min    -", "max    -"]


def test_job_detail_shows_progress_result_and_error():
    text = tables.job_detail(
        job(
            status="failed",
            error={"code": "invalid_input", "message": "record 10 is bad"},
            partial_result={"count": 1, "sum": 2, "min": 2, "max": 2},
        )
    )
    assert "progress        2/4 chunks (40%)" in text
    assert "error           invalid_input: record 10 is bad" in text
    assert "partial result  count=1 sum=2 min=2 max=2" in text
    assert "created         2026-01-02 03:04:05" in text
    assert "column_index" not in text
    assert "completed " not in text.replace("completed 2", "")


def test_job_table_lists_workload_owner_status_progress_chunks_and_labels():
    done = job(id="other", status="succeeded", progress=1.0, chunks_completed=4, labels={})
    lines = tables.job_table([job(), done]).splitlines()
    assert lines[0].split() == [
        "ID",
        "WORKLOAD",
        "OWNER",
        "STATUS",
        "PROGRESS",
        "CHUNKS",
        "PRIORITY",
        "LABELS",
        "CREATED",
    ]
    assert lines[1].split()[:8] == [
        JOB_ID,
        "csv_stats",
        "compute_user",
        "running",
        "40%",
        "2/4",
        "0",
        "team=a",
    ]
    assert lines[2].split()[2:8] == ["compute_user", "succeeded", "100%", "4/4", "0", "-"]


def test_job_table_and_detail_leave_the_owner_blank_when_a_coordinator_gives_none():
    older = {k: v for k, v in job().items() if k != "owner"}
    assert tables.job_table([older]).splitlines()[1].split()[:4] == [
        JOB_ID,
        "csv_stats",
        "-",
        "running",
    ]
    assert "owner" not in tables.job_detail(older)
    assert "\nowner       compute_user\n" in tables.job_detail(job())


def test_chunk_table_shows_record_ranges_and_errors():
    failed = chunk(1, "failed", error={"code": "invalid_input", "message": "bad"})
    lines = tables.chunk_table([chunk(0), failed]).splitlines()
    assert lines[1].split()[:5] == ["0", CHUNK_ID, "completed", "1/3", "0-5000"]
    assert lines[2].endswith("invalid_input: bad")


def test_chunk_detail_lists_every_attempt():
    text = tables.chunk_detail(chunk(2, summary=RESULT))
    assert "records       10000-15000" in text
    assert f"summary       count={RESULT['count']}" in text
    assert text.splitlines()[-1].split()[:3] == ["1", "worker-1", "completed"]


def test_chunk_detail_says_when_a_waiting_chunk_may_run():
    waiting = chunk(2, "pending", not_before="2026-01-02T03:05:00+00:00")

    assert "\nnot before    2026-01-02 03:05:00\n" in tables.chunk_detail(waiting)
    assert "not before" not in tables.chunk_detail(chunk(2))


def test_a_scheduled_jobs_detail_says_when_it_may_start():
    scheduled = job(status="queued", not_before="2026-01-03T00:00:00+00:00")

    assert "\nnot before  2026-01-03 00:00:00\n" in tables.job_detail(scheduled)
    assert "not before" not in tables.job_detail(job())


def test_a_dependent_jobs_detail_names_the_jobs_it_depends_on():
    ids = ["6f1c1a1e-0000-4000-8000-000000000001", "6f1c1a1e-0000-4000-8000-000000000002"]

    detail = tables.job_detail(job(status="queued", depends_on=ids))

    assert f"\ndepends on  {ids[0]}, {ids[1]}\n" in detail
    assert "depends on" not in tables.job_detail(job(depends_on=[]))


def test_a_timed_jobs_detail_names_its_timeout_and_a_running_chunk_its_deadline():
    running = chunk(2, "leased", deadline="2026-01-02T03:05:00+00:00")

    assert "\ntimeout     90 s an attempt\n" in tables.job_detail(job(timeout_seconds=90))
    assert "timeout" not in tables.job_detail(job())
    assert "\ndeadline      2026-01-02 03:05:00\n" in tables.chunk_detail(running)
    assert "deadline" not in tables.chunk_detail(chunk(2))


def test_records_done_counts_only_completed_chunks():
    assert tables.records_done([chunk(0), chunk(1, "leased"), chunk(2)]) == 10000


def test_a_schedules_line_says_when_it_runs_next_and_what_its_last_run_did():
    ran = {
        "name": "nightly",
        "owner": "ana",
        "cron": "0 3 * * *",
        "paused": False,
        "next_run_at": "2026-12-06T03:00:00+00:00",
        "last_run_at": "2026-12-05T03:00:00+00:00",
        "last_job_id": JOB_ID,
        "last_error": None,
    }
    refused = {
        **ran,
        "name": "often",
        "timezone": "Asia/Tokyo",
        "last_error": {"code": "queue_full", "message": "full"},
    }
    paused = {**ran, "name": "later", "paused": True, "last_run_at": None, "last_job_id": None}

    lines = tables.schedule_table([ran, refused, paused]).splitlines()

    assert lines[1].split()[:2] == ["nightly", "ana"]
    assert lines[1].endswith(f"2026-12-06 03:00:00  2026-12-05 03:00:00  {JOB_ID}")
    assert lines[2].endswith("queue_full: full") and "0 3 * * * (Asia/Tokyo)" in lines[2]
    assert "(UTC)" not in lines[1]
    assert " paused " in lines[3]


def test_queue_view_counts_the_schedules_and_says_how_late_a_run_is():
    text = tables.queue_view(QUEUE)
    on_time = tables.queue_view({**QUEUE, "schedules": {**QUEUE["schedules"], "lag_seconds": None}})

    assert "\nschedules             3 active, 1 paused, 1 failing; a run 2 min 5 s late" in text
    assert on_time.endswith("schedules             3 active, 1 paused, 1 failing")


def test_queue_view_names_each_paused_workload_with_who_paused_it_and_since_when():
    paused = [{"workload": "echo", **PAUSE}, {"workload": "render", **PAUSE, "paused_by": "ana"}]

    text = tables.queue_view({**QUEUE, "paused_workloads": paused})

    assert text.endswith(
        "\npaused workloads      echo (by operator since 2026-12-05 11:00:00 UTC), "
        "render (by ana since 2026-12-05 11:00:00 UTC)"
    )


@pytest.mark.parametrize("queue", [{**QUEUE, "paused_workloads": []}, QUEUE])
def test_queue_view_says_nothing_of_pauses_when_no_workload_is_paused(queue):
    assert "paused workloads" not in tables.queue_view(queue)


def test_workload_table_shows_each_workloads_state_who_paused_it_its_caps_and_rate():
    lines = tables.workload_table(WORKLOADS["workloads"]).splitlines()

    assert re.split(" {2,}", lines[0]) == [
        "WORKLOAD",
        "STATE",
        "PAUSED BY",
        "PAUSED SINCE (UTC)",
        "MAX LEASES/WORKER",
        "MAX LEASES",
        "MAX QUEUED TASKS",
        "MAX TASKS/JOB",
        "MAX STARTS/S",
    ]
    assert lines[1].split() == ["csv_stats", "running", "-", "-", "-", "-", "256", "64", "-"]
    assert lines[2].split() == [
        "echo",
        "paused",
        "operator",
        "2026-12-05",
        "11:00:00",
        "1",
        "4",
        "100",
        "10",
        "2.5",
    ]


def test_queue_view_pivots_chunk_states_by_workload():
    lines = tables.queue_view(QUEUE).splitlines()
    assert lines[0].split() == ["WORKLOAD", "PENDING", "LEASED", "COMPLETED", "FAILED", "CANCELLED"]
    assert lines[1].split() == ["csv_stats", "3", "2", "0", "0", "0"]
    assert lines[2].split() == ["render", "0", "0", "11", "0", "0"]
    text = "\n".join(lines)
    assert "oldest pending chunk  1 min 15 s" in text
    assert "active leases         2 of 8 (at most 2 per worker)" in text
    assert "unfinished chunks     5 of 256" in text
    assert "waiting               csv_stats 1, render 4" in text


def test_worker_table_shows_heartbeat_age_leases_of_the_limit_and_peak_memory():
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    lines = tables.worker_table(WORKERS["workers"], now).splitlines()
    assert "LAST HEARTBEAT" in lines[0]
    assert lines[1].split() == [
        "worker-1",
        "2.0",
        "s",
        "ago",
        "2",
        "csv_stats",
        "1",
        "of",
        "2",
        "12",
        "55.0",
        "MiB",
    ]


def test_worker_table_shows_leases_alone_from_a_coordinator_that_gives_no_limit():
    worker = {k: v for k, v in WORKERS["workers"][0].items() if k != "lease_limit"}
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    row = tables.worker_table([worker], now).splitlines()[1].split()
    assert row[6:8] == ["1", "12"]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "-"), (0.04, "0.0 s"), (59.9, "59.9 s"), (61, "1 min 1 s"), (7322, "2 h 2 min")],
)
def test_ages_read_naturally(seconds, text):
    assert tables.format_age(seconds) == text


@pytest.mark.parametrize(
    ("size", "text"), [(None, "-"), (512, "512 B"), (2048, "2.0 KiB"), (57_671_680, "55.0 MiB")]
)
def test_byte_counts_use_binary_units(size, text):
    assert tables.format_bytes(size) == text


def test_event_lines_keep_fixed_columns():
    line = tables.event_line(EVENT)
    assert line.startswith(f"      42  2026-01-02 03:04:07  {JOB_ID}  job.succeeded     ")
    assert json.loads(line.split("  ")[-1]) == {"result": RESULT}


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_progress_on_a_terminal_redraws_one_line():
    stream, clock = FakeTerminal(), Clock()
    progress = tables.ProgressDisplay(stream, clock=clock)
    clock.now = 12.0
    progress.show(job(), 10000)
    progress.show(job(chunks_completed=4, status="succeeded"), 20000)
    progress.finish()
    text = stream.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n") and text.count("\n") == 1
    assert "[" + "#" * 15 + "." * 15 + "] running  2/4 chunks  10000/20000 records  00:12" in text
    assert "succeeded  4/4 chunks  20000/20000 records  00:12" in text


def test_progress_off_a_terminal_prints_a_line_per_change_and_now_and_then():
    stream, clock = io.StringIO(), Clock()
    progress = tables.ProgressDisplay(stream, clock=clock)
    progress.show(job(), 10000)
    clock.now = 1.0
    progress.show(job(), 10000)  # nothing new, not due: no line
    clock.now = 11.0
    progress.show(job(), 10000)  # nothing new but due
    progress.show(job(chunks_completed=3), 15000)
    progress.finish()
    assert stream.getvalue().splitlines() == [
        "running  2/4 chunks  10000/20000 records  00:00",
        "running  2/4 chunks  10000/20000 records  00:11",
        "running  3/4 chunks  15000/20000 records  00:11",
    ]
    assert "\r" not in stream.getvalue()


def test_progress_of_a_manifest_job_leaves_out_records():
    manifest = job(workload="render", parameters={})
    assert tables.progress_line(manifest, None, 65) == "running  2/4 chunks  01:05"


class CannedClient:
    """Answers every read with a canned document."""

    def __init__(self, url, token):
        pass

    def get_job(self, job_id, *, trace_id):
        return job(status="succeeded", progress=1.0, chunks_completed=4, result=RESULT)

    def list_jobs(self, *, trace_id, **query):
        return {"jobs": [job()], "next_cursor": None}

    def list_chunks(self, job_id, *, trace_id):
        return {"chunks": [chunk(0), chunk(1)]}

    def chunk_page(self, job_id, *, after, limit, trace_id):
        return {"chunks": [chunk(0), chunk(1)][after + 1 : after + 1 + limit], "next_after": 1}

    def get_chunk(self, job_id, chunk_id, *, trace_id):
        return chunk(0)

    def cancel_job(self, job_id, *, trace_id):
        return job(status="cancelled")

    def retry_job(self, job_id, *, trace_id):
        return job(status="running")

    def list_events(self, *, after, limit, job_id, types, trace_id):
        wanted = after < EVENT["id"] and (not types or EVENT["event"] in types)
        return {"events": [EVENT] if wanted else [], "next_after": EVENT["id"]}

    def queue_status(self, *, trace_id):
        return QUEUE

    def list_workers(self, *, trace_id):
        return WORKERS

    def list_workloads(self, *, trace_id):
        return WORKLOADS

    def pause_workload(self, workload, *, paused, trace_id):
        state = {"paused": True, **PAUSE} if paused else RUNNING
        return {**WORKLOADS["workloads"][1], "workload": workload, **state}

    def close(self):
        pass


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["status", JOB_ID], lambda doc: doc["result"] == RESULT),
        (["result", JOB_ID], lambda doc: doc["result"] == RESULT),
        (["jobs"], lambda doc: doc["jobs"][0]["id"] == JOB_ID),
        (["chunks", JOB_ID], lambda doc: len(doc["chunks"]) == 2),
        (["chunk", JOB_ID, CHUNK_ID], lambda doc: doc["index"] == 0),
        (["chunk", JOB_ID, "1"], lambda doc: doc["index"] == 0),
        (["cancel", JOB_ID], lambda doc: doc["status"] == "cancelled"),
        (["retry", JOB_ID], lambda doc: doc["status"] == "running"),
        (["events"], lambda doc: doc["events"][0]["id"] == 42),
        (["queue"], lambda doc: doc == QUEUE),
        (["workers"], lambda doc: doc == WORKERS),
        (["workloads"], lambda doc: doc == WORKLOADS),
        (["pause-workload", "echo"], lambda doc: doc["paused"] and doc["workload"] == "echo"),
        (["resume-workload", "echo"], lambda doc: not doc["paused"] and doc["workload"] == "echo"),
    ],
)
def test_json_output_is_the_servers_document(argv, expected):
    out = io.StringIO()
    env = {"CHUNKWISE_URL": "http://c.test", "CHUNKWISE_TOKEN": "cwu_t"}
    assert (
        run([*argv, "--json"], client_factory=CannedClient, out=out, err=io.StringIO(), environ=env)
        == 0
    )
    assert expected(json.loads(out.getvalue()))


@pytest.mark.parametrize(
    ("types", "ids"), [([], [42]), (["job.failed"], []), (["job.failed", "job.succeeded"], [42])]
)
def test_events_are_asked_for_by_each_type_given(types, ids):
    out = io.StringIO()
    env = {"CHUNKWISE_URL": "http://c.test", "CHUNKWISE_TOKEN": "cwu_t"}
    argv = ["events", "--json", *[arg for t in types for arg in ("--type", t)]]

    assert run(argv, client_factory=CannedClient, out=out, err=io.StringIO(), environ=env) == 0
    assert [e["id"] for e in json.loads(out.getvalue())["events"]] == ids


def test_followed_events_in_json_are_one_document_per_line():
    out = io.StringIO()
    env = {"CHUNKWISE_URL": "http://c.test", "CHUNKWISE_TOKEN": "cwu_t"}
    status = run(
        ["events", "--follow", "--json", "--max-events", "1"],
        client_factory=CannedClient,
        out=out,
        err=io.StringIO(),
        environ=env,
    )
    assert status == 0
    assert [json.loads(line)["id"] for line in out.getvalue().splitlines()] == [42]


def run_canned(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    env = {"CHUNKWISE_URL": "http://c.test", "CHUNKWISE_TOKEN": "cwu_t"}
    status = run(argv, client_factory=CannedClient, out=out, err=io.StringIO(), environ=env)
    return status, out.getvalue()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["pause-workload", "render"],
            "workload render is paused (by operator since 2026-12-05 11:00:00 UTC)\n",
        ),
        (["resume-workload", "render"], "workload render is running\n"),
    ],
)
def test_pausing_or_resuming_a_workload_says_in_one_line_which_it_now_is(argv, said):
    assert run_canned(argv) == (0, said)


def test_workloads_prints_the_table_of_served_workloads():
    status, out = run_canned(["workloads"])

    assert status == 0
    assert out == tables.workload_table(WORKLOADS["workloads"]) + "\n"
