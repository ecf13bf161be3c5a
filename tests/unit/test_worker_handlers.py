"""Handler lookup, the task context, and the csv_stats handler on the real CSV core."""

from __future__ import annotations

import hashlib
import importlib.metadata

import pytest

from services import csvstats
from services.csvstats import columnar
from tests.unit.fakes import (
    BrokenStream,
    FakeClient,
    FakeClock,
    task_payload,
    wait_until_idle,
)
from worker_cli import handlers
from worker_cli.client import CoordinatorUnavailable
from worker_cli.handlers import (
    ENTRY_POINT_GROUP,
    ChunkStopped,
    ClaimedTask,
    InputRejected,
    InputUnavailable,
    TaskContext,
    UnknownWorkload,
    find_handler,
    load_handlers,
    share_cores,
    summarise_csv,
    usable_cores,
)
from worker_cli.worker import LeaseLoop
from worker_cli.worker_config import WorkerConfig


def resize_plugin(task, context):
    """A plugin handler: returns a manifest instead of a summary."""
    data = b"".join(context.read_input())
    return {
        "result_uri": f"s3://results/{task.task_id}",
        "result_sha256": hashlib.sha256(data[::-1]).hexdigest(),
        "metrics": {"records": 1},
    }


not_a_handler = 42


@pytest.fixture
def plugins(monkeypatch):
    """Install entry points in chunkwise.handlers by name -> 'module:attr'."""

    def install(**targets: str) -> None:
        points = [
            importlib.metadata.EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)
            for name, value in targets.items()
        ]

        def entry_points(*, group=None, **kwargs):
            return [p for p in points if p.group == group]

        monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)

    return install


# -- lookup -------------------------------------------------------------------------------


def test_plugin_handlers_are_found_by_workload_name(plugins):
    plugins(resize=f"{__name__}:resize_plugin")
    assert find_handler("resize") is resize_plugin


def test_csv_stats_is_built_in_and_a_plugin_cannot_replace_it(plugins):
    plugins(csv_stats=f"{__name__}:resize_plugin")
    assert find_handler("csv_stats") is summarise_csv


def test_unknown_workload_is_an_error(plugins):
    plugins(resize=f"{__name__}:resize_plugin")
    with pytest.raises(UnknownWorkload):
        find_handler("transcode")


def test_entry_point_that_is_not_callable_is_refused(plugins):
    plugins(broken=f"{__name__}:not_a_handler")
    with pytest.raises(UnknownWorkload):
        find_handler("broken")


def test_handlers_are_loaded_for_every_configured_workload(plugins):
    plugins(resize=f"{__name__}:resize_plugin")
    assert load_handlers(["csv_stats", "resize"]) == {
        "csv_stats": summarise_csv,
        "resize": resize_plugin,
    }


def test_polars_gets_the_cores_one_slot_has(monkeypatch):
    monkeypatch.setattr(handlers.os, "environ", {})
    monkeypatch.setattr(handlers.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    share_cores(2)
    assert handlers.os.environ == {"POLARS_MAX_THREADS": "4"}


def test_polars_keeps_one_thread_when_slots_outnumber_cores(monkeypatch):
    monkeypatch.setattr(handlers.os, "environ", {})
    monkeypatch.setattr(handlers.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    share_cores(16)
    assert handlers.os.environ == {"POLARS_MAX_THREADS": "1"}


def test_a_pool_size_the_environment_gives_is_kept(monkeypatch):
    monkeypatch.setattr(handlers.os, "environ", {"POLARS_MAX_THREADS": "3"})
    share_cores(2)
    assert handlers.os.environ == {"POLARS_MAX_THREADS": "3"}


@pytest.fixture
def cgroups(tmp_path, monkeypatch):
    """Eight cores of affinity, and a cgroup tree: write(group, quota) sets a group's cpu.max,
    member(line) the process's /proc/self/cgroup."""
    root = tmp_path / "cgroup"
    root.mkdir()
    monkeypatch.setattr(handlers, "CGROUP_ROOT", root)
    monkeypatch.setattr(handlers, "SELF_CGROUP", tmp_path / "self-cgroup")
    monkeypatch.setattr(handlers.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)

    def write(group: str, quota: str) -> None:
        (root / group).mkdir(parents=True, exist_ok=True)
        (root / group / "cpu.max").write_text(quota + "\n")

    def member(text: str) -> None:
        (tmp_path / "self-cgroup").write_text(text)

    return write, member


def test_a_containers_cpu_quota_caps_the_cores_polars_shares(cgroups, monkeypatch):
    write, member = cgroups
    member("0::/docker/abc\n")
    write("docker", "max 100000")
    write("docker/abc", "200000 100000")  # --cpus=2
    monkeypatch.setattr(handlers.os, "environ", {})

    share_cores(1)

    assert usable_cores() == 2
    assert handlers.os.environ == {"POLARS_MAX_THREADS": "2"}


def test_the_tightest_quota_of_the_groups_above_the_process_wins(cgroups):
    write, member = cgroups
    member("0::/kubepods/pod1/ctr\n")
    write("kubepods/pod1", "150000 100000")
    write("kubepods/pod1/ctr", "300000 100000")
    assert usable_cores() == 1  # 1.5 cores round down


def test_a_quota_under_one_core_still_leaves_one(cgroups):
    write, member = cgroups
    member("0::/small\n")
    write("small", "50000 100000")
    assert usable_cores() == 1


@pytest.mark.parametrize(
    "membership",
    ["0::/\n", "4:memory:/x\n1:cpu:/x\n", "0::/gone\n"],
    ids=["the root group", "cgroup v1 only", "a group with no cpu.max"],
)
def test_without_a_readable_quota_the_affinity_counts(cgroups, membership):
    _, member = cgroups
    member(membership)
    assert usable_cores() == 8


def test_an_unreadable_cpu_max_is_no_quota(cgroups):
    write, member = cgroups
    member("0::/odd\n")
    write("odd", "not a quota")
    assert usable_cores() == 8


def test_plugin_manifest_is_submitted_with_the_workers_metrics(plugins):
    plugins(resize=f"{__name__}:resize_plugin")
    clock = FakeClock()
    payload = task_payload("t1", workload="resize", data=b"pixels")
    client = FakeClient(clock, claims=[[payload]], inputs={payload["input_uri"]: b"pixels"})
    worker = LeaseLoop(
        client,
        WorkerConfig(worker_id="w1", workloads=("resize",), capacity=1),
        clock=clock,
        sleep=clock.sleep,
    )

    worker.run_once()
    assert wait_until_idle(worker)

    result = client.results[0]["result"]
    assert result["result_uri"] == "s3://results/t1"
    assert result["result_sha256"] == hashlib.sha256(b"slexip").hexdigest()
    assert result["metrics"]["bytes"] == 6 and "peak_rss_bytes" in result["metrics"]


def test_a_claimed_task_tells_its_handler_its_deadline_when_its_job_has_a_timeout():
    payload = task_payload("t1")
    deadline = "2026-12-05T03:00:00+00:00"

    assert ClaimedTask.from_payload(payload).deadline is None
    assert ClaimedTask.from_payload({**payload, "deadline": deadline}).deadline == deadline


# -- the task context ---------------------------------------------------------------------


def context_for(data: bytes, sha256: str | None = None, blocks: int = 3) -> TaskContext:
    task = ClaimedTask.from_payload(task_payload("t1", data=data, sha256=sha256))
    size = max(1, len(data) // blocks)
    return TaskContext(
        task, open_input=lambda: [data[i : i + size] for i in range(0, len(data), size)]
    )


def test_input_matching_its_digest_reads_through():
    context = context_for(b"0123456789")
    assert b"".join(context.read_input()) == b"0123456789"
    context.finish_input()
    assert context.bytes_read == 10


def test_input_with_another_digest_raises_input_unavailable_at_its_end():
    context = context_for(b"0123456789", sha256="ab" * 32)
    with pytest.raises(InputUnavailable) as caught:
        b"".join(context.read_input())
    assert caught.value.details["actual_sha256"] == hashlib.sha256(b"0123456789").hexdigest()


def test_input_left_unread_is_verified_when_the_handler_returns():
    context = context_for(b"0123456789", sha256="ab" * 32)
    next(iter(context.read_input()))
    with pytest.raises(InputUnavailable):
        context.finish_input()


def test_a_stopped_chunk_stops_at_its_next_block_or_checkpoint():
    context = context_for(b"0123456789")
    blocks = iter(context.read_input())
    next(blocks)
    context.stop("task_cancelled")
    with pytest.raises(ChunkStopped):
        next(blocks)
    with pytest.raises(ChunkStopped):
        context.save_checkpoint({"records_done": 1})


# -- csv_stats on the real core -----------------------------------------------------------


def csv_records(n: int, bad_at: int | None = None) -> bytes:
    rows = []
    for i in range(n):
        value = "oops" if i == bad_at else str((i * 7919) % 1000 - 500)
        rows.append(f"row{i},{value},x\n")
    return "".join(rows).encode()


def csv_payload(data: bytes, *, checkpoint=None, task_id="t1", attempt=1) -> dict:
    payload = task_payload(
        task_id, data=data, workload="csv_stats", checkpoint=checkpoint, attempt=attempt
    )
    payload["parameters"] = {
        "column": "amount",
        "column_index": 1,
        "delimiter": ",",
        "record_start": 1000,
        "record_end": 1000 + data.count(b"\n"),
        "first_line": 1002,
    }
    return payload


def run_csv_chunk(payload: dict, data) -> FakeClient:
    clock = FakeClock()
    client = FakeClient(clock, claims=[[payload]], inputs={payload["input_uri"]: data})
    worker = LeaseLoop(
        client, WorkerConfig(worker_id="w1", capacity=1), clock=clock, sleep=clock.sleep
    )
    worker.run_once()
    assert wait_until_idle(worker)
    return client


def direct_summary(data: bytes) -> csvstats.Summary:
    return csvstats.summarise(
        [data],
        column_index=1,
        column="amount",
        delimiter=",",
        record_start=1000,
        first_line=1002,
        checkpoint=None,
        on_checkpoint=None,
    )


def test_csv_stats_submits_the_cores_summary_and_record_count():
    data = csv_records(500)
    client = run_csv_chunk(csv_payload(data), data)

    [result] = client.results
    assert result["result"]["summary"] == direct_summary(data).to_dict()
    assert result["result"]["summary"]["digest"] == hashlib.sha256(data).hexdigest()
    assert result["result"]["metrics"]["records"] == 500
    assert result["result"]["metrics"]["bytes"] == len(data)


def test_resuming_from_a_checkpoint_gives_the_uninterrupted_result(monkeypatch):
    monkeypatch.setattr(handlers, "CHECKPOINT_EVERY", 100)
    data = csv_records(550)

    # A first attempt saves checkpoints and is cancelled after the third.
    first = ClaimedTask.from_payload(csv_payload(data))
    context = TaskContext(
        first, open_input=lambda: [data[i : i + 64] for i in range(0, len(data), 64)]
    )
    saved = []
    original_save = context.save_checkpoint

    def save_then_cancel(checkpoint):
        saved.append(checkpoint)
        if len(saved) == 3:
            context.stop("task_cancelled")
        original_save(checkpoint)

    context.save_checkpoint = save_then_cancel
    with pytest.raises(ChunkStopped):
        summarise_csv(first, context)
    assert saved[-1]["records_done"] == 300

    # The retry is handed that checkpoint in its claim and must pass it to the core.
    seen = []
    real_summarise = csvstats.summarise

    def spy(blocks, **kwargs):
        seen.append(kwargs["checkpoint"])
        return real_summarise(blocks, **kwargs)

    # The compiled engine hands a resumed chunk to the core.
    monkeypatch.setattr(columnar, "summarise", spy)
    client = run_csv_chunk(csv_payload(data, checkpoint=saved[-1], attempt=2), data)

    assert seen[0] == csvstats.Checkpoint.from_dict(saved[-1])
    assert client.results[0]["result"]["summary"] == direct_summary(data).to_dict()


def test_malformed_checkpoint_is_ignored_and_the_chunk_starts_over():
    data = csv_records(50)
    client = run_csv_chunk(csv_payload(data, checkpoint={"records_done": "lots"}), data)
    assert client.results[0]["result"]["summary"] == direct_summary(data).to_dict()


def test_checkpoints_reach_the_coordinator_on_the_next_heartbeat(monkeypatch):
    monkeypatch.setattr(handlers, "CHECKPOINT_EVERY", 100)
    data = csv_records(250)
    task = ClaimedTask.from_payload(csv_payload(data))
    context = TaskContext(task, open_input=lambda: [data])

    summarise_csv(task, context)

    seq, checkpoint = context.unsent_checkpoint()
    assert checkpoint["records_done"] == 200
    assert csvstats.Checkpoint.from_dict(checkpoint).partial.records == 200


def test_invalid_record_fails_the_chunk_for_good_with_record_line_and_partial_summary():
    data = csv_records(40, bad_at=17)
    client = run_csv_chunk(csv_payload(data), data)

    assert client.results == []
    [failure] = client.failures
    assert failure["error_code"] == "invalid_input"
    assert failure["retryable"] is False
    details = failure["details"]
    # Records count from 1 across the file; this chunk starts after record 1000, on line 1002.
    assert details["record"] == 1000 + 17 + 1
    assert details["line"] == 1002 + 17
    assert details["column"] == "amount"
    summary = csvstats.Summary.from_dict(details["summary"])
    assert summary.error is not None and summary.digest == hashlib.sha256(data).hexdigest()
    assert summary.count == 17
    assert failure["error_message"] == summary.error.message()


def test_csv_chunk_with_corrupted_bytes_is_input_unavailable_not_invalid_input():
    data = csv_records(40, bad_at=3)
    payload = csv_payload(data)
    payload["input_sha256"] = hashlib.sha256(b"the bytes the coordinator meant").hexdigest()
    client = run_csv_chunk(payload, data)

    [failure] = client.failures
    assert failure["error_code"] == "input_unavailable" and failure["retryable"] is True


def test_csv_chunk_whose_input_is_cut_by_coordinator_blips_gives_the_uninterrupted_summary():
    data = csv_records(2000)
    cut = CoordinatorUnavailable("input stream broke: connection reset")
    inputs = [
        BrokenStream(data, after=len(data) // 3, error=cut),
        CoordinatorUnavailable("database unavailable", status=503, retry_after=1),
        BrokenStream(data, after=len(data) // 2, error=cut),
        data,
    ]
    client = run_csv_chunk(csv_payload(data), inputs)

    assert client.failures == []
    [result] = client.results
    assert result["result"]["summary"] == direct_summary(data).to_dict()
    assert result["result"]["metrics"]["bytes"] == len(data)
    assert len(client.input_reads) == 4


def test_invalid_input_exception_carries_the_partial_summary():
    data = csv_records(5, bad_at=2)
    task = ClaimedTask.from_payload(csv_payload(data))
    with pytest.raises(InputRejected) as caught:
        summarise_csv(task, TaskContext(task, open_input=lambda: [data]))
    assert caught.value.details["summary"]["count"] == 2
