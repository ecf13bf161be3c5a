"""A scripted coordinator client and a clock that moves only when told, for worker tests."""

from __future__ import annotations

import hashlib
import threading
import time

from worker_cli.client import LeaseLost, RequestRejected
from worker_cli.worker import LeaseLoop
from worker_cli.worker_config import WorkerConfig

WAIT = 5.0  # real seconds a test may wait for a chunk thread before it counts as hung


class FakeClock:
    """A monotonic clock that moves only when slept on or set."""

    def __init__(self, now: float = 1000.0):
        self.now = now
        self.sleeps: list[float] = []
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            self.now += seconds


class FakeClient:
    """Scripted coordinator: each list holds replies (a value, or an exception to raise)."""

    def __init__(self, clock: FakeClock, *, claims=(), inputs=None):
        self.clock = clock
        self.claim_replies = list(claims)
        self.inputs = dict(inputs or {})
        self.heartbeat_replies: list = []
        self.result_replies: list = []
        self.failure_replies: list = []
        self.claims: list[dict] = []
        # Complete and fetch: each call's claim, and its replies (none scripted: none leased).
        self.fetches: list[dict] = []
        self.fetch_replies: list = []
        self.heartbeats: list[dict] = []
        self.heartbeat_calls: list[list[str]] = []  # the task ids of each renew_leases call
        self.input_reads: list[dict] = []
        self.results: list[dict] = []
        self.failures: list[dict] = []
        self.claim_seconds = 0.0

    def claim_tasks(self, **kwargs):
        self.claims.append({**kwargs, "at": self.clock.now})
        self.clock.now += self.claim_seconds
        reply = self.claim_replies.pop(0) if self.claim_replies else []
        if isinstance(reply, Exception):
            raise reply
        if callable(reply):
            return reply(**kwargs)
        return reply

    def stream_input(self, input_uri, **kwargs):
        self.input_reads.append({"input_uri": input_uri, **kwargs})
        data = self.inputs[input_uri]
        if isinstance(data, list):  # one reply per read, the last one repeated
            data = data.pop(0) if len(data) > 1 else data[0]
        if isinstance(data, Exception):
            raise data
        if isinstance(data, BrokenStream):
            return data.blocks()
        return [data[i : i + 7] for i in range(0, len(data), 7)]

    def _renew(self, task_id, **kwargs):
        self.heartbeats.append({"task_id": task_id, "at": self.clock.now, **kwargs})
        return _reply(self.heartbeat_replies, {"lease_expires_at": "2030-01-01T00:00:00Z"})

    def renew_leases(self, *, worker_id, heartbeats, trace_id=None):
        """Each heartbeat of the call as its own heartbeat(); a refusal answers its item alone,
        an unavailable coordinator fails the call."""
        self.heartbeat_calls.append([item["task_id"] for item in heartbeats])
        answers = []
        for item in heartbeats:
            body = dict(item)
            task_id = body.pop("task_id")
            body.setdefault("checkpoint", None)
            try:
                reply = self._renew(task_id, worker_id=worker_id, trace_id=trace_id, **body)
            except (LeaseLost, RequestRejected) as exc:
                error = {"code": exc.code, "message": exc.message, "details": exc.details}
                answers.append(
                    {
                        "task_id": task_id,
                        "outcome": "rejected",
                        "status": exc.status,
                        "error": error,
                    }
                )
            else:
                answers.append({"task_id": task_id, "outcome": "renewed", "status": 200, **reply})
        return answers

    def submit_results(self, *, worker_id, results, trace_id=None):
        """Each result of the call as its own submit_result; an exception fails the call."""
        answers = []
        for item in results:
            body = dict(item)
            task_id, attempt = body.pop("task_id"), body.pop("attempt")
            self.submit_result(
                task_id,
                worker_id=worker_id,
                attempt=attempt,
                lease_token=body.pop("lease_token"),
                result=body,
                trace_id=trace_id,
            )
            answers.append(
                {"task_id": task_id, "outcome": "accepted", "status": 200, "error": None}
            )
        return answers

    def complete_and_claim(self, *, worker_id, results, workloads, capacity, trace_id=None):
        """The results as submit_results takes them, then the next fetch reply (an exception
        fails the whole call)."""
        self.fetches.append({"workloads": workloads, "capacity": capacity, "trace_id": trace_id})
        reply = self.fetch_replies.pop(0) if self.fetch_replies else []
        if isinstance(reply, Exception):
            raise reply
        if callable(reply):
            reply = reply(capacity=capacity)
        answers = self.submit_results(worker_id=worker_id, results=results, trace_id=trace_id)
        return answers, reply

    def submit_result(self, task_id, **kwargs):
        self.results.append({"task_id": task_id, "at": self.clock.now, **kwargs})
        return _reply(self.result_replies, {"status": "completed"})

    def report_failure(self, task_id, **kwargs):
        self.failures.append({"task_id": task_id, **kwargs})
        return _reply(self.failure_replies, {"status": "pending"})


class BrokenStream:
    """An input whose stream breaks with `error` after `after` bytes, as a cut connection does."""

    def __init__(self, data: bytes, *, after: int, error: Exception):
        self.data = data
        self.after = after
        self.error = error

    def blocks(self):
        for start in range(0, self.after, 7):
            yield self.data[start : min(start + 7, self.after)]
        raise self.error


def _reply(replies: list, default):
    reply = replies.pop(0) if replies else default
    if isinstance(reply, Exception):
        raise reply
    return reply


def task_payload(
    task_id="t1",
    *,
    data=b"a,b\n1,2\n",
    attempt=1,
    heartbeat_seconds=10.0,
    workload="fake",
    sha256=None,
    checkpoint=None,
    lease_expires_at=None,
):
    return {
        "task_id": task_id,
        "job_id": "j1",
        "chunk_index": 0,
        "attempt": attempt,
        "attempt_id": f"{task_id}-a{attempt}",
        "trace_id": hashlib.md5(f"{task_id}{attempt}".encode()).hexdigest(),
        "workload": workload,
        "input_uri": f"/api/v1/tasks/{task_id}/input",
        "input_sha256": sha256 or hashlib.sha256(data).hexdigest(),
        "parameters": {},
        "checkpoint": checkpoint,
        "lease_expires_at": lease_expires_at,
        "heartbeat_seconds": heartbeat_seconds,
        "lease_token": f"cwl_{hashlib.sha256(f'{task_id}{attempt}'.encode()).hexdigest()}",
    }


def read_all(task, context) -> dict:
    data = b"".join(context.read_input())
    return {"summary": {"length": len(data)}, "metrics": {"records": data.count(b"\n")}}


def make_worker(client, clock, handler=read_all, **config) -> LeaseLoop:
    config.setdefault("workloads", ("fake",))
    config.setdefault("worker_id", "w1")
    return LeaseLoop(
        client,
        WorkerConfig(**config),
        clock=clock,
        sleep=clock.sleep,
        handlers={"fake": handler},
        rng=lambda: 0.5,
        hard_exit=lambda status: (_ for _ in ()).throw(HardExit(status)),
    )


class HardExit(Exception):
    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


def wait_until_idle(worker: LeaseLoop, timeout: float = WAIT) -> bool:
    """Wait in real time (the chunks run on real threads) until nothing is in flight."""
    deadline = time.monotonic() + timeout
    while worker.in_flight:
        if time.monotonic() > deadline:
            return False
        worker.wait_for_slot(0.01)
    return True
