"""The worker loop with a fake coordinator client and an injected clock: no network, no sleeps."""

from __future__ import annotations

import logging
import signal
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.unit.fakes import (
    WAIT,
    BrokenStream,
    FakeClient,
    FakeClock,
    HardExit,
    make_worker,
    read_all,
    task_payload,
    wait_until_idle,
)
from worker_cli.chunk import ResumingInput
from worker_cli.client import CoordinatorUnavailable, LeaseLost, RequestRejected, StorageFailed
from worker_cli.handlers import ChunkStopped, ClaimedTask, InputRejected, RetryLater
from worker_cli.schedule import Backoff
from worker_cli.worker import LeaseLoop
from worker_cli.worker_config import Fault


class Gate:
    """A handler that reads its input, then computes until released (or told to stop)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.stop_reason: str | None = None
        self.checkpoints = 0

    def __call__(self, task, context) -> dict:
        body = read_all(task, context)
        self.started.set()
        try:
            while not self.release.wait(0.005):
                self.checkpoints += 1
                context.save_checkpoint({"records_done": self.checkpoints})
        except BaseException:
            self.stop_reason = context.stop_reason
            self.stopped.set()
            raise
        return body


def setup(*payloads_per_claim, handler=read_all, **config):
    clock = FakeClock()
    inputs = {}
    claims = []
    for payloads in payloads_per_claim:
        if isinstance(payloads, list):
            for p in payloads:
                inputs[p["input_uri"]] = p.pop("_data", b"a,b\n1,2\n")
        claims.append(payloads)
    client = FakeClient(clock, claims=claims, inputs=inputs)
    return clock, client, make_worker(client, clock, handler, **config)


def with_data(payload: dict, data: bytes) -> dict:
    return {**payload, "_data": data}


# -- claiming -----------------------------------------------------------------------------


def test_claims_up_to_free_capacity_and_not_while_all_slots_are_busy():
    gate = Gate()
    clock, client, worker = setup(
        [task_payload("t1"), task_payload("t2")], handler=gate, capacity=2
    )

    worker.run_once()
    worker.run_once()  # both slots busy: must wait, not claim

    assert [c["capacity"] for c in client.claims] == [2]
    assert worker.in_flight == 2
    gate.release.set()
    assert wait_until_idle(worker)


def test_claims_only_the_slots_that_freed_up():
    gate = Gate()
    clock, client, worker = setup(
        [task_payload("t1"), task_payload("t2")], handler=gate, capacity=3
    )

    worker.run_once()
    worker.run_once()

    assert [c["capacity"] for c in client.claims] == [3, 1]
    gate.release.set()
    assert wait_until_idle(worker)


def test_empty_long_poll_claims_do_not_spin():
    clock, client, worker = setup(capacity=1, wait_seconds=10)

    for _ in range(5):
        worker.run_once()

    claim_times = [c["at"] for c in client.claims]
    assert len(claim_times) == 5
    gaps = [b - a for a, b in zip(claim_times, claim_times[1:], strict=False)]
    assert all(gap >= worker.config.idle_poll_seconds for gap in gaps)
    assert all(c["wait_seconds"] == 10 for c in client.claims)


def test_a_claim_that_waited_its_long_poll_is_followed_at_once():
    clock, client, worker = setup(capacity=1, wait_seconds=10)
    client.claim_seconds = 10  # the coordinator held the poll open

    worker.run_once()

    assert clock.sleeps == []


def test_claims_use_a_fresh_trace_id_per_poll():
    clock, client, worker = setup(capacity=1)
    for _ in range(3):
        worker.run_once()
    assert len({c["trace_id"] for c in client.claims}) == 3


# -- backoff ------------------------------------------------------------------------------


def test_backoff_grows_to_its_cap():
    backoff = Backoff(1.0, 10.0, rng=lambda: 1.0)
    assert [backoff.next_delay() for _ in range(6)] == [1, 2, 4, 8, 10, 10]


def test_backoff_is_jittered_within_half_to_full_delay():
    backoff = Backoff(1.0, 30.0)
    delays = []
    for _ in range(200):
        backoff.reset()
        backoff.next_delay()
        backoff.next_delay()
        delays.append(backoff.next_delay())  # third failure: ceiling 4
    assert all(2.0 <= d <= 4.0 for d in delays)
    assert len(set(delays)) > 100


def test_backoff_honours_retry_after_up_to_the_cap():
    backoff = Backoff(1.0, 30.0, rng=lambda: 0.0)
    assert backoff.next_delay(retry_after=7) == 7
    assert backoff.next_delay(retry_after=300) == 30


def test_claim_backoff_grows_on_unavailable_and_resets_on_success():
    down = CoordinatorUnavailable("connection refused")
    clock, client, worker = setup(
        down,
        down,
        down,
        [],
        down,
        down,
        capacity=1,
        claim_backoff_base=1.0,
        claim_backoff_cap=3.0,
        idle_poll_seconds=0,
    )

    for _ in range(6):
        worker.run_once()

    times = [c["at"] for c in client.claims]
    gaps = [round(b - a, 3) for a, b in zip(times, times[1:], strict=False)]
    # rng 0.5 gives 3/4 of each ceiling (1, 2, then 4 capped to 3); the empty but successful
    # claim resets the delay to the base.
    assert gaps == [0.75, 1.5, 2.25, 0, 0.75]


def test_claim_backoff_on_5xx_and_429():
    clock, client, worker = setup(
        CoordinatorUnavailable("busy", status=503),
        CoordinatorUnavailable("slow down", status=429, retry_after=12),
        capacity=1,
    )
    worker.run_once()
    worker.run_once()
    assert sum(clock.sleeps) == pytest.approx(0.75 + 12)


@pytest.mark.parametrize(
    "answer",
    [
        LeaseLost("conflict", status=409, code="conflict"),
        StorageFailed("insufficient storage", status=507),
        CoordinatorUnavailable("POST /api/v1/tasks/claim: the answer holds no list of tasks"),
    ],
    ids=["409", "507", "malformed"],
)
def test_a_claim_answer_the_api_never_gives_is_backed_off_and_the_worker_goes_on(answer):
    clock, client, worker = setup(answer, [task_payload("t1")], capacity=1)

    worker.run_once()
    worker.run_once()
    wait_until_idle(worker)

    assert len(client.claims) == 2 and clock.sleeps[0] > 0  # backed off first
    assert [r["task_id"] for r in client.results] == ["t1"]


def test_rejected_claim_stops_the_worker_with_status_1():
    clock, client, worker = setup(RequestRejected("bad token", status=401), capacity=1)
    assert worker.run() == 1
    assert len(client.claims) == 1


# -- heartbeats ---------------------------------------------------------------------------


def test_heartbeats_every_heartbeat_seconds_during_a_long_chunk():
    gate = Gate()
    clock, client, worker = setup(
        [task_payload("t1", heartbeat_seconds=10)], handler=gate, capacity=1
    )
    start = clock.now
    worker.run_once()
    assert gate.started.wait(WAIT)

    for second in range(1, 61):
        clock.now = start + second
        worker.send_due_heartbeats()

    assert [b["at"] - start for b in client.heartbeats] == [10, 20, 30, 40, 50, 60]
    assert all(b["attempt"] == 1 and b["worker_id"] == "w1" for b in client.heartbeats)
    gate.release.set()
    assert wait_until_idle(worker)
    assert len(client.results) == 1


def test_heartbeat_carries_only_a_checkpoint_newer_than_the_last_one_sent():
    clock = FakeClock()
    client = FakeClient(clock)
    worker, context = dispatch_waiting(clock, client)
    start = clock.now
    context.save_checkpoint({"records_done": 100})
    clock.now = start + 10
    worker.send_due_heartbeats()
    clock.now = start + 20
    worker.send_due_heartbeats()
    context.save_checkpoint({"records_done": 200})
    clock.now = start + 30
    worker.send_due_heartbeats()

    assert [b["checkpoint"] for b in client.heartbeats] == [
        {"records_done": 100},
        None,
        {"records_done": 200},
    ]
    worker.release.set()
    assert wait_until_idle(worker)


def dispatch_waiting(clock, client):
    """Start a chunk whose handler waits, so the test drives its checkpoints itself."""
    release = threading.Event()
    worker = make_worker(client, clock, lambda task, context: release.wait(WAIT) and {}, capacity=1)
    worker.release = release
    payload = task_payload("t9")
    client.inputs[payload["input_uri"]] = b""
    chunk = worker.dispatch(ClaimedTask.from_payload(payload))
    client.heartbeats.clear()
    return worker, chunk.context


@pytest.mark.parametrize(
    "failure",
    [CoordinatorUnavailable("down"), StorageFailed("insufficient storage", status=507)],
    ids=["unavailable", "507 from a proxy"],
)
def test_failed_heartbeat_is_retried_soon_and_resends_its_checkpoint(failure):
    clock = FakeClock()
    client = FakeClient(clock)
    worker, context = dispatch_waiting(clock, client)
    context.save_checkpoint({"records_done": 5})
    client.heartbeat_replies = [failure]
    start = clock.now

    for second in (10, 11, 12, 13, 21, 22):
        clock.now = start + second
        worker.send_due_heartbeats()

    # Failed at 10, retried 2 s later, then back on the 10 s cadence from the success.
    assert [b["at"] - start for b in client.heartbeats] == [10, 12, 22]
    assert [b["checkpoint"] for b in client.heartbeats] == [{"records_done": 5}] * 2 + [None]
    worker.release.set()
    assert wait_until_idle(worker)


@pytest.mark.parametrize("code", ["task_cancelled", "timed_out", "lease_lost"])
def test_409_heartbeat_stops_the_computation_and_submits_nothing(code):
    gate = Gate()
    clock, client, worker = setup([task_payload("t1")], handler=gate, capacity=1)
    worker.run_once()
    assert gate.started.wait(WAIT)
    client.heartbeat_replies = [LeaseLost("refused", status=409, code=code)]

    worker.send_due_heartbeats(clock.now + 10)

    assert gate.stopped.wait(WAIT), "the handler should be stopped at its next checkpoint"
    assert gate.stop_reason == code
    assert wait_until_idle(worker)
    assert client.results == [] and client.failures == []
    worker.send_due_heartbeats(clock.now + 100)
    assert len(client.heartbeats) == 1


def test_a_chunk_with_a_deadline_beats_just_after_it_and_stops_as_timed_out():
    gate = Gate()
    clock = FakeClock()
    client = FakeClient(clock)
    worker = make_worker(client, clock, gate, capacity=1)
    deadline = datetime.now(UTC) + timedelta(seconds=3)
    payload = {**task_payload("t1", data=b"x"), "deadline": deadline.isoformat()}
    client.inputs[payload["input_uri"]] = b"x"
    start = clock.now
    worker.dispatch(ClaimedTask.from_payload(payload))
    assert gate.started.wait(WAIT)
    client.heartbeat_replies = [LeaseLost("late", status=409, code="timed_out")]

    early = worker.send_due_heartbeats(start + 3.2)
    just_after = worker.send_due_heartbeats(start + 3.6)

    assert (early, just_after) == (0, 1)
    assert gate.stopped.wait(WAIT) and gate.stop_reason == "timed_out"
    assert wait_until_idle(worker)
    assert client.results == [] and client.failures == []


def test_a_chunk_without_a_deadline_beats_a_heartbeat_interval_after_its_claim():
    clock = FakeClock()
    client = FakeClient(clock)
    worker, _ = dispatch_waiting(clock, client)

    assert worker.send_due_heartbeats(clock.now + 9.9) == 0
    assert worker.send_due_heartbeats(clock.now + 10) == 1
    worker.release.set()
    assert wait_until_idle(worker)


class Held:
    """A handler that holds every chunk until released, noting the chunks told to stop."""

    def __init__(self, chunks: int) -> None:
        self.release = threading.Event()
        self.started = threading.Semaphore(0)
        self.stopped: set[str] = set()
        self.chunks = chunks

    def __call__(self, task, context) -> dict:
        read_all(task, context)
        self.started.release()
        try:
            while not self.release.wait(0.005):
                context.save_checkpoint({"records_done": 1})
        except BaseException:
            self.stopped.add(task.task_id)
            raise
        return {}

    def all_started(self) -> bool:
        return all(self.started.acquire(timeout=WAIT) for _ in range(self.chunks))


def hold(*task_ids: str):
    """A worker running one held chunk per task id, each of them started."""
    held = Held(len(task_ids))
    payloads = [task_payload(t) for t in task_ids]
    clock, client, worker = setup(payloads, handler=held, capacity=len(task_ids))
    worker.run_once()
    assert held.all_started()
    return held, clock, client, worker


def test_leases_due_together_are_renewed_in_one_call():
    held, clock, client, worker = hold("t1", "t2", "t3")

    assert worker.send_due_heartbeats(clock.now + 10) == 3

    assert client.heartbeat_calls == [["t1", "t2", "t3"]]
    held.release.set()
    assert wait_until_idle(worker)


def test_a_lease_refused_in_a_batch_stops_only_its_own_chunk():
    held, clock, client, worker = hold("t1", "t2")
    client.heartbeat_replies = [LeaseLost("gone", status=409, code="lease_lost")]

    worker.send_due_heartbeats(clock.now + 10)

    deadline = time.monotonic() + WAIT
    while held.stopped != {"t1"} and time.monotonic() < deadline:
        time.sleep(0.01)
    assert held.stopped == {"t1"}
    worker.send_due_heartbeats(clock.now + 20)
    assert client.heartbeat_calls == [["t1", "t2"], ["t2"]]
    held.release.set()
    assert wait_until_idle(worker)
    assert [r["task_id"] for r in client.results] == ["t2"]


def test_more_leases_than_one_call_may_carry_go_in_several_calls(monkeypatch):
    monkeypatch.setattr("worker_cli.chunk.MAX_BATCH", 2)
    held, clock, client, worker = hold("t1", "t2", "t3")

    worker.send_due_heartbeats(clock.now + 10)

    assert client.heartbeat_calls == [["t1", "t2"], ["t3"]]
    held.release.set()
    assert wait_until_idle(worker)


def test_an_unavailable_coordinator_retries_every_lease_of_the_call_soon():
    held, clock, client, worker = hold("t1", "t2")
    client.heartbeat_replies = [CoordinatorUnavailable("down")]
    start = clock.now

    for second in (10, 11, 12):
        worker.send_due_heartbeats(start + second)

    # The fake fails the call at its first item; both leases are tried again 2 s later.
    assert client.heartbeat_calls == [["t1", "t2"], ["t1", "t2"]]
    held.release.set()
    assert wait_until_idle(worker)


def test_heartbeats_result_and_input_use_the_attempts_trace_id():
    clock, client, worker = setup([task_payload("t1")], capacity=1)
    payload_trace = task_payload("t1")["trace_id"]
    worker.run_once()
    assert wait_until_idle(worker)

    assert client.input_reads[0]["trace_id"] == payload_trace
    assert client.results[0]["trace_id"] == payload_trace
    assert client.input_reads[0]["attempt"] == 1


# -- results ------------------------------------------------------------------------------


def test_result_carries_attempt_summary_and_metrics():
    clock, client, worker = setup([task_payload("t1", attempt=3)], capacity=1)
    worker.run_once()
    assert wait_until_idle(worker)

    [result] = client.results
    assert result["attempt"] == 3 and result["worker_id"] == "w1"
    assert result["result"]["summary"] == {"length": 8}
    metrics = result["result"]["metrics"]
    assert set(metrics) >= {"elapsed_seconds", "records", "bytes", "peak_rss_bytes"}
    assert metrics["records"] == 2 and metrics["bytes"] == 8
    assert metrics["peak_rss_bytes"] > 1024 * 1024


def test_result_submission_is_retried_with_backoff_on_5xx():
    clock, client, worker = setup([task_payload("t1")], capacity=1)
    client.result_replies = [
        CoordinatorUnavailable("down"),
        CoordinatorUnavailable("busy", status=503),
        CoordinatorUnavailable("slow", status=429),
    ]
    worker.run_once()
    assert wait_until_idle(worker)

    assert len(client.results) == 4
    gaps = [b["at"] - a["at"] for a, b in zip(client.results, client.results[1:], strict=False)]
    assert gaps == sorted(gaps) and gaps[0] < gaps[-1]


def test_result_submission_gives_up_once_the_lease_must_have_expired():
    clock, client, worker = setup([task_payload("t1", heartbeat_seconds=10)], capacity=1)
    client.result_replies = [CoordinatorUnavailable("down")] * 1000
    worker.run_once()
    assert wait_until_idle(worker)

    # No lease_expires_at in the payload: the lease is taken as 3 heartbeats (30 s).
    assert 3 < len(client.results) < 20
    assert client.results[-1]["at"] - client.results[0]["at"] <= 30
    assert client.failures == []


def test_result_409_drops_the_chunk_and_the_worker_carries_on():
    clock, client, worker = setup([task_payload("t1")], [task_payload("t2")], capacity=1)
    client.result_replies = [LeaseLost("gone", status=409, code="stale_attempt")]

    worker.run_once()
    assert wait_until_idle(worker)
    worker.run_once()
    assert wait_until_idle(worker)

    assert [r["task_id"] for r in client.results] == ["t1", "t2"]
    assert client.failures == []


def test_rejected_result_is_reported_as_a_retryable_worker_error():
    clock, client, worker = setup([task_payload("t1")], capacity=1)
    client.result_replies = [
        RequestRejected("summary does not match", status=400, code="invalid_input")
    ]
    worker.run_once()
    assert wait_until_idle(worker)

    [failure] = client.failures
    assert failure["error_code"] == "worker_error" and failure["retryable"] is True


# -- error classes ------------------------------------------------------------------------


def test_digest_mismatch_is_a_retryable_input_unavailable():
    payload = task_payload("t1", sha256="0" * 64)
    clock, client, worker = setup([payload], capacity=1)
    worker.run_once()
    assert wait_until_idle(worker)

    [failure] = client.failures
    assert failure["error_code"] == "input_unavailable" and failure["retryable"] is True
    assert failure["details"]["expected_sha256"] == "0" * 64
    assert client.results == []


def test_an_input_the_coordinator_fails_to_serve_is_a_retryable_input_unavailable():
    payload = task_payload("t1")
    clock, client, worker = setup([payload], capacity=1)
    client.inputs[payload["input_uri"]] = CoordinatorUnavailable("internal error", status=500)
    worker.run_once()
    assert wait_until_idle(worker)

    [failure] = client.failures
    assert failure["error_code"] == "input_unavailable" and failure["retryable"] is True
    assert len(client.input_reads) == 1  # a 500 is no blip: not retried by the worker


# -- coordinator blips while reading the input --------------------------------------------

DATA = b"id,value\n" + b"".join(b"%d,%d\n" % (i, i * 7) for i in range(40))


def blips(*errors: Exception) -> list:
    """Input replies: each blip once, then the whole input."""
    return [*errors, DATA]


def run_one_chunk(inputs) -> tuple:
    payload = task_payload("t1", data=DATA)
    clock, client, worker = setup([payload], capacity=1)
    client.inputs[payload["input_uri"]] = inputs
    worker.run_once()
    assert wait_until_idle(worker)
    return clock, client


def test_503_429_and_no_answer_on_opening_the_input_are_retried_and_the_chunk_succeeds():
    clock, client = run_one_chunk(
        blips(
            CoordinatorUnavailable("database unavailable", status=503, retry_after=2),
            CoordinatorUnavailable("slow down", status=429),
            CoordinatorUnavailable("connection refused"),
        )
    )

    assert client.failures == []
    [result] = client.results
    assert result["result"]["summary"] == {"length": len(DATA)}
    assert len(client.input_reads) == 4
    # Backoff from 0.5 s doubling (rng 0.5 puts each delay at 3/4 of its ceiling), and a
    # Retry-After is honoured.
    assert clock.sleeps[:3] == [2.0, 0.75, 1.5]


def test_an_input_stream_cut_three_times_resumes_and_hands_on_each_byte_once():
    cut = CoordinatorUnavailable("input stream broke: connection reset")
    clock, client = run_one_chunk(
        [
            BrokenStream(DATA, after=50, error=cut),
            BrokenStream(DATA, after=120, error=cut),
            CoordinatorUnavailable("busy", status=503),
            BrokenStream(DATA, after=121, error=cut),
            DATA,
        ]
    )

    assert client.failures == []
    [result] = client.results
    # read_all reports the length of what it was handed: a repeated byte would show.
    assert result["result"]["summary"] == {"length": len(DATA)}
    assert result["result"]["metrics"]["bytes"] == len(DATA)


def test_an_outage_longer_than_the_lease_drops_the_chunk_without_reporting_a_failure(caplog):
    # Whatever level an earlier test left the root logger at (create_app sets it).
    caplog.set_level(logging.WARNING)
    down = CoordinatorUnavailable("database unavailable", status=503)
    clock, client = run_one_chunk([down])

    assert client.failures == [] and client.results == []
    # task_payload has no lease_expires_at, so the lease is taken to be 3 heartbeats (30 s).
    assert sum(clock.sleeps) < 30
    dropped = [r for r in caplog.records if getattr(r, "event", None) == "dropped"]
    assert [r.reason for r in dropped] == ["coordinator_unavailable"]


def test_resumed_input_that_is_not_the_same_bytes_fails_its_digest():
    changed = DATA.replace(b"7", b"8")
    cut = CoordinatorUnavailable("input stream broke")
    clock, client = run_one_chunk([BrokenStream(DATA, after=30, error=cut), changed])

    [failure] = client.failures
    assert failure["error_code"] == "input_unavailable"
    assert failure["details"]["actual_sha256"] != failure["details"]["expected_sha256"]


def test_resuming_input_skips_what_it_passed_on_across_uneven_blocks():
    cut = CoordinatorUnavailable("cut")
    replies = [
        BrokenStream(DATA, after=10, error=cut).blocks(),
        BrokenStream(DATA, after=33, error=cut).blocks(),
        iter([DATA[:5], DATA[5:60], DATA[60:]]),
    ]
    clock = FakeClock()
    stream = ResumingInput(
        lambda start: replies.pop(0),
        backoff=Backoff(0.5, 8.0, rng=lambda: 0.5),
        patience=30.0,
        clock=clock,
        sleep=clock.sleep,
        log=lambda *args, **fields: None,
    )

    assert b"".join(stream) == DATA
    assert clock.sleeps == [0.375, 0.375]  # progress between the cuts reset the backoff


class RangedBlocks(list):
    """The blocks a coordinator serving ranges answers, from `first_byte` on."""

    def __init__(self, data: bytes, first_byte: int):
        super().__init__([data[first_byte:]])
        self.first_byte = first_byte


def test_resuming_input_asks_for_the_bytes_after_the_cut_and_drops_none_of_a_ranged_answer():
    cut = CoordinatorUnavailable("cut")
    asked = []

    def open_stream(start: int):
        asked.append(start)
        if start == 0:
            return BrokenStream(DATA, after=21, error=cut).blocks()
        return RangedBlocks(DATA, start)

    ranged = ResumingInput(
        open_stream,
        backoff=Backoff(0.5, 8.0, rng=lambda: 0.5),
        patience=30.0,
        clock=FakeClock(),
        sleep=lambda seconds: None,
        log=lambda *args, **fields: None,
    )

    assert b"".join(ranged) == DATA
    assert asked == [0, 21]


def test_resuming_input_cut_after_its_last_byte_ends_when_the_range_is_past_the_end():
    cut = CoordinatorUnavailable("cut")
    past_the_end = RequestRejected("range_not_satisfiable", status=416)
    replies = [BrokenStream(DATA, after=len(DATA), error=cut).blocks(), past_the_end]

    def open_stream(start: int):
        reply = replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    stream = ResumingInput(
        open_stream,
        backoff=Backoff(0.5, 8.0, rng=lambda: 0.5),
        patience=30.0,
        clock=FakeClock(),
        sleep=lambda seconds: None,
        log=lambda *args, **fields: None,
    )

    assert b"".join(stream) == DATA


def test_resuming_input_gives_up_as_a_stopped_chunk_once_the_lease_is_spent():
    clock = FakeClock()
    stream = ResumingInput(
        lambda start: (_ for _ in ()).throw(CoordinatorUnavailable("refused")),
        backoff=Backoff(0.5, 8.0, rng=lambda: 0.5),
        patience=10.0,
        clock=clock,
        sleep=clock.sleep,
        log=lambda *args, **fields: None,
    )

    with pytest.raises(ChunkStopped) as stopped:
        b"".join(stream)

    assert stopped.value.reason == "coordinator_unavailable"
    assert sum(clock.sleeps) < 10


def test_input_409_drops_the_chunk_without_a_failure_report():
    payload = task_payload("t1")
    clock, client, worker = setup([payload], capacity=1)
    client.inputs[payload["input_uri"]] = LeaseLost("not yours", status=409, code="lease_lost")
    worker.run_once()
    assert wait_until_idle(worker)
    assert client.failures == [] and client.results == []


def test_an_input_refused_as_cancelled_is_logged_as_a_dropped_chunk_with_its_reason(caplog):
    # However the worker hears of a cancel (a heartbeat, or the input's own 409), the chunk's
    # end is logged the same way, so an operator finds every dropped chunk under one event.
    payload = task_payload("t1")
    clock, client, worker = setup([payload], capacity=1)
    client.inputs[payload["input_uri"]] = LeaseLost("cancelled", status=409, code="task_cancelled")
    with caplog.at_level(logging.INFO):
        worker.run_once()
        assert wait_until_idle(worker)
    dropped = [r for r in caplog.records if getattr(r, "event", None) == "dropped"]
    assert [r.reason for r in dropped] == ["task_cancelled"]


def test_an_input_cut_and_then_refused_stops_the_chunk_at_once_without_a_failure_report():
    # A coordinator whose archive breaks under the stream fails the attempt before the cut
    # (services.tasks.serve_input): the reopen is refused and the worker stops there, rather
    # than retrying the stream until its lease runs out.
    cut = CoordinatorUnavailable("input stream broke: connection reset")
    refused = LeaseLost("not leased", status=409, code="stale_attempt")
    clock, client = run_one_chunk([BrokenStream(DATA, after=50, error=cut), refused])

    assert client.failures == [] and client.results == []
    assert len(client.input_reads) == 2
    assert sum(clock.sleeps) < 1


def test_invalid_input_is_not_retryable_and_keeps_its_details():
    def reject(task, context):
        list(context.read_input())
        raise InputRejected("line 3: not a number", details={"record": 2, "line": 3})

    clock, client, worker = setup([task_payload("t1")], handler=reject, capacity=1)
    worker.run_once()
    assert wait_until_idle(worker)

    [failure] = client.failures
    assert failure["error_code"] == "invalid_input" and failure["retryable"] is False
    assert failure["error_message"] == "line 3: not a number"
    assert failure["details"] == {"record": 2, "line": 3}


def test_invalid_input_on_corrupted_bytes_is_reported_as_input_unavailable():
    def reject_early(task, context):
        next(iter(context.read_input()))  # stops reading at the first bad record
        raise InputRejected("bad record", details={"record": 0, "line": 1})

    clock, client, worker = setup(
        [task_payload("t1", sha256="1" * 64)], handler=reject_early, capacity=1
    )
    worker.run_once()
    assert wait_until_idle(worker)

    [failure] = client.failures
    assert failure["error_code"] == "input_unavailable"


def failure_reported_for(error: Exception) -> dict:
    """The one failure report a chunk whose handler raises `error` sends."""

    def crash(task, context):
        raise error

    clock, client, worker = setup([task_payload("t1")], handler=crash, capacity=1)
    worker.run_once()
    assert wait_until_idle(worker)
    [failure] = client.failures
    return failure


def test_handler_crash_is_a_retryable_worker_error():
    failure = failure_reported_for(ZeroDivisionError("division by zero"))

    assert failure["error_code"] == "worker_error" and failure["retryable"] is True
    assert failure["error_message"] == "ZeroDivisionError: division by zero"
    assert "ZeroDivisionError" in failure["details"]["traceback"]


def test_a_handler_that_says_retry_later_asks_the_coordinator_to_wait_that_long():
    failure = failure_reported_for(RetryLater("the upstream said 503", seconds=45))

    assert (failure["error_code"], failure["error_message"]) == (
        "retry_later",
        "the upstream said 503",
    )
    assert failure["retryable"] is True and failure["retry_after_seconds"] == 45


def test_any_other_failure_leaves_the_wait_to_the_coordinators_backoff():
    assert failure_reported_for(ValueError("no"))["retry_after_seconds"] is None


def test_unknown_workload_is_a_worker_error():
    clock, client, worker = setup([task_payload("t1", workload="other")], capacity=1)
    worker.run_once()
    assert wait_until_idle(worker)
    assert client.failures[0]["error_code"] == "worker_error"


# -- stopping -----------------------------------------------------------------------------


def run_in_thread(worker: LeaseLoop) -> tuple[threading.Thread, list]:
    status: list = []
    thread = threading.Thread(target=lambda: status.append(worker.run()), daemon=True)
    thread.start()
    return thread, status


def test_warm_shutdown_stops_claiming_finishes_in_flight_and_exits_0():
    gate = Gate()
    clock, client, worker = setup(
        [task_payload("t1")], [task_payload("t2")], handler=gate, capacity=1
    )
    thread, status = run_in_thread(worker)
    assert gate.started.wait(WAIT)

    worker.handle_signal(signal.SIGTERM)
    gate.release.set()
    thread.join(WAIT)

    assert status == [0]
    assert len(client.claims) == 1, "t2 was there to claim, but the worker was stopping"
    assert [r["task_id"] for r in client.results] == ["t1"]


def test_warm_shutdown_abandons_chunks_still_running_after_the_grace_period():
    gate = Gate()
    clock, client, worker = setup([task_payload("t1")], handler=gate, capacity=1, grace_seconds=30)
    worker.run_once()
    assert gate.started.wait(WAIT)

    worker.handle_signal(signal.SIGTERM)
    assert worker.run_once() is True
    clock.now += 31
    assert worker.run_once() is False

    assert gate.stopped.wait(WAIT)
    assert wait_until_idle(worker)
    assert client.results == [] and client.failures == []


def test_second_sigterm_exits_at_once_with_a_nonzero_status():
    gate = Gate()
    clock, client, worker = setup([task_payload("t1")], handler=gate, capacity=1)
    worker.run_once()

    worker.handle_signal(signal.SIGTERM)
    with pytest.raises(HardExit) as exited:
        worker.handle_signal(signal.SIGTERM)

    assert exited.value.status == 128 + signal.SIGTERM
    gate.release.set()
    wait_until_idle(worker)


def test_sigint_exits_at_once():
    clock, client, worker = setup(capacity=1)
    with pytest.raises(HardExit) as exited:
        worker.handle_signal(signal.SIGINT)
    assert exited.value.status == 128 + signal.SIGINT


def test_burst_exits_when_the_queue_is_empty_and_nothing_is_in_flight():
    clock, client, worker = setup([task_payload("t1"), task_payload("t2")], capacity=2, burst=True)
    assert worker.run() == 0
    assert sorted(r["task_id"] for r in client.results) == ["t1", "t2"]
    assert all(c["wait_seconds"] == 0 for c in client.claims)


def test_burst_keeps_going_while_chunks_are_in_flight():
    gate = Gate()
    clock, client, worker = setup(
        [task_payload("t1")], [], [task_payload("t2")], handler=gate, capacity=2, burst=True
    )
    worker.run_once()
    assert worker.run_once() is True  # empty, but t1 is still running
    gate.release.set()
    assert wait_until_idle(worker)
    assert worker.run_once() is True  # t2 claimed
    assert wait_until_idle(worker)
    assert worker.run_once() is False  # empty and idle: burst ends


def test_max_tasks_stops_claiming_after_n_chunks_and_exits_when_done():
    def as_asked(capacity, **kwargs):
        return [task_payload(f"t{time.perf_counter_ns()}-{i}") for i in range(capacity)]

    clock, client, worker = setup(capacity=2, max_tasks=3)
    client.claim_replies = [as_asked] * 10
    client.stream_input = lambda uri, **kw: [b"a,b\n1,2\n"]

    assert worker.run() == 0

    assert len(client.results) == 3
    assert sum(c["capacity"] for c in client.claims) == 3


# -- complete and fetch -------------------------------------------------------------------


def test_a_batch_of_results_claims_the_slot_it_frees_and_runs_what_it_leased():
    gate = Gate()
    clock, client, worker = setup([task_payload("t1")], handler=gate, capacity=1)
    client.fetch_replies = [[task_payload("t2")]]
    client.stream_input = lambda uri, **kw: [b"a,b\n1,2\n"]

    worker.run_once()
    gate.release.set()  # t1 finishes once its claim is done with
    assert wait_until_idle(worker)

    assert [r["task_id"] for r in client.results] == ["t1", "t2"]
    assert [f["capacity"] for f in client.fetches] == [1, 1]
    assert {tuple(f["workloads"]) for f in client.fetches} == {("fake",)}
    assert len(client.claims) == 1


def test_max_tasks_counts_the_tasks_batches_of_results_lease():
    def as_asked(capacity, **kwargs):
        return [task_payload(f"t{time.perf_counter_ns()}-{i}") for i in range(capacity)]

    clock, client, worker = setup(capacity=2, max_tasks=3)
    client.claim_replies = [as_asked] * 10
    client.fetch_replies = [as_asked] * 10
    client.stream_input = lambda uri, **kw: [b"a,b\n1,2\n"]

    assert worker.run() == 0

    assert len(client.results) == 3
    asked = [c["capacity"] for c in client.claims] + [f["capacity"] for f in client.fetches]
    assert sum(asked) == 3


def test_the_loop_leaves_alone_the_slots_a_batch_of_results_holds():
    clock, client, worker = setup([task_payload("t1")], capacity=3)

    assert worker.reserve(0) == 3
    worker.run_once()  # every slot held: no claim
    assert client.claims == []
    worker.deliver([], 3, None)
    worker.run_once()

    assert [c["capacity"] for c in client.claims] == [3]
    assert wait_until_idle(worker)


def test_a_stopping_worker_sends_its_results_without_claiming():
    clock, client, worker = setup(capacity=2)
    worker.request_stop("test")

    assert worker.reserve(2) == 0


# -- faults -------------------------------------------------------------------------------


def test_crash_fault_exits_17_after_compute_and_before_submit():
    clock, client, worker = setup(
        [task_payload("t1")], capacity=1, fault=Fault.parse("crash-after-compute")
    )
    exits = []
    worker._hard_exit = lambda status: (
        exits.append(status) or (_ for _ in ()).throw(HardExit(status))
    )
    worker.run_once()
    assert wait_until_idle(worker)
    assert exits == [17]
    assert client.results == []


def test_pause_fault_stops_heartbeats_then_submits_and_is_fenced_off():
    clock, client, worker = setup(
        [task_payload("t1")], capacity=1, fault=Fault.parse("pause-after-compute=45")
    )
    client.result_replies = [LeaseLost("expired", status=409, code="lease_lost")]
    worker.run_once()
    assert wait_until_idle(worker)

    assert 45 in clock.sleeps
    assert client.heartbeats == []
    assert len(client.results) == 1 and client.failures == []


def test_fault_spec_is_parsed_strictly():
    assert Fault.parse("pause-after-compute=2.5") == Fault("pause-after-compute", 2.5)
    for bad in ("crash", "pause-after-compute", "pause-after-compute=x", "crash-after-compute=1"):
        with pytest.raises(ValueError):
            Fault.parse(bad)


def test_input_uri_the_coordinator_does_not_serve_is_input_unavailable():
    payload = task_payload("t1")
    clock, client, worker = setup([payload], capacity=1)
    client.inputs[payload["input_uri"]] = ValueError("refusing to call s3://elsewhere")
    worker.run_once()
    assert wait_until_idle(worker)
    assert client.failures[0]["error_code"] == "input_unavailable"


def test_a_failure_whose_text_the_coordinator_could_not_store_is_sent_with_it_replaced():
    failure = failure_reported_for(ValueError("bad byte \x00 and \udcff"))

    assert failure["error_message"] == "ValueError: bad byte \ufffd and \ufffd"
    assert "\x00" not in failure["details"]["traceback"]


def test_failure_messages_are_cut_to_what_the_coordinator_accepts():
    assert len(failure_reported_for(RuntimeError("x" * 10_000))["error_message"]) == 4000
