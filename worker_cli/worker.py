"""The lease loop: claim chunks into free slots, run each in a thread, heartbeat, submit."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import math
import os
import random
import resource
import secrets
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from worker_cli.client import (
    CoordinatorClient,
    CoordinatorUnavailable,
    LeaseLost,
    RequestRejected,
    new_trace_id,
)
from worker_cli.handlers import (
    ChunkStopped,
    ClaimedTask,
    Handler,
    InputUnavailable,
    InvalidInput,
    TaskContext,
    UnknownWorkload,
    load_handlers,
)
from worker_cli.logs import configure_logging, log_scope

logger = logging.getLogger(__name__)

CRASH_AFTER_COMPUTE = "crash-after-compute"
PAUSE_AFTER_COMPUTE = "pause-after-compute"
CRASH_EXIT_STATUS = 17
# Longest single wait of the loop and heartbeat threads, so a stop or a new lease is noticed soon.
TICK_SECONDS = 0.5
HEARTBEAT_RETRY_SECONDS = 2.0
MAX_ERROR_MESSAGE = 4000


# The suffix starts at random and counts up: random keeps containers apart (every worker may be
# pid 1 under the same hostname), counting keeps two workers of one process apart for certain.
_worker_suffixes = itertools.count(secrets.randbelow(1 << 24))


def default_worker_id() -> str:
    """Return `<hostname>-<pid>-<6 random hex>`: readable, and never shared by two workers."""
    suffix = next(_worker_suffixes) % (1 << 24)
    return f"{socket.gethostname()}-{os.getpid()}-{suffix:06x}"


def peak_rss_bytes() -> int:
    """Return this process's peak resident set size in bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak if sys.platform == "darwin" else peak * 1024


@dataclass(frozen=True)
class Fault:
    """A failure to inject on purpose after a chunk is computed (for tests of fencing)."""

    point: str
    seconds: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Fault:
        """Parse `crash-after-compute` or `pause-after-compute=SECONDS`."""
        point, _, value = text.partition("=")
        if point == CRASH_AFTER_COMPUTE and not value:
            return cls(point)
        if point == PAUSE_AFTER_COMPUTE and value:
            try:
                seconds = float(value)
            except ValueError:
                seconds = -1.0
            if seconds >= 0:
                return cls(point, seconds)
        raise ValueError(
            f"unknown fault {text!r}: use {CRASH_AFTER_COMPUTE} or {PAUSE_AFTER_COMPUTE}=SECONDS"
        )


@dataclass(frozen=True)
class WorkerConfig:
    """How one worker process claims and runs chunks."""

    worker_id: str
    workloads: tuple[str, ...] = ("csv_stats",)
    capacity: int = 2
    wait_seconds: float = 10.0
    burst: bool = False
    max_tasks: int | None = None
    grace_seconds: float = 30.0
    fault: Fault | None = None
    # Least time between two claims that come back empty, in case the coordinator does not wait.
    idle_poll_seconds: float = 1.0
    claim_backoff_base: float = 1.0
    claim_backoff_cap: float = 30.0
    submit_backoff_base: float = 0.5
    submit_backoff_cap: float = 8.0

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError("capacity must be at least 1")
        if not 0 <= self.wait_seconds <= 30:
            raise ValueError("wait_seconds must be between 0 and 30")
        if self.max_tasks is not None and self.max_tasks < 1:
            raise ValueError("max_tasks must be at least 1")
        if self.grace_seconds < 0:
            raise ValueError("grace_seconds must not be negative")
        if not self.workloads:
            raise ValueError("at least one workload is needed")


class Backoff:
    """Capped exponential delay with jitter, reset after a success."""

    def __init__(self, base: float, cap: float, *, rng: Callable[[], float] = random.random):
        self.base = base
        self.cap = cap
        self.failures = 0
        self._rng = rng

    def next_delay(self, retry_after: float | None = None) -> float:
        """Return how long to wait before the next try, and count one more failure."""
        ceiling = min(self.cap, self.base * 2**self.failures)
        self.failures += 1
        # "Equal jitter": never zero (so no spin), never above the cap, and spread out so a
        # fleet of workers that lost the coordinator together do not return together.
        delay = ceiling / 2 + self._rng() * ceiling / 2
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.cap))
        return delay

    def reset(self) -> None:
        """Start again from the base delay."""
        self.failures = 0


class HeartbeatSchedule:
    """When each in-flight chunk's next heartbeat is due, on the worker's clock."""

    def __init__(self) -> None:
        self._due: dict[tuple, float] = {}
        self._lock = threading.Lock()

    def add(self, key: tuple, due_at: float) -> None:
        """Start beating for a chunk."""
        with self._lock:
            self._due[key] = due_at

    def remove(self, key: tuple) -> None:
        """Stop beating for a chunk."""
        with self._lock:
            self._due.pop(key, None)

    def reschedule(self, key: tuple, due_at: float) -> None:
        """Move a chunk's next beat, unless it was removed meanwhile."""
        with self._lock:
            if key in self._due:
                self._due[key] = due_at

    def due(self, now: float) -> list[tuple]:
        """Return the chunks whose beat is due at `now`, most overdue first."""
        with self._lock:
            return [key for key, at in sorted(self._due.items(), key=lambda kv: kv[1]) if at <= now]

    def next_due(self) -> float | None:
        """Return when the next beat of any chunk is due, or None."""
        with self._lock:
            return min(self._due.values(), default=None)


@dataclass
class RunningChunk:
    """A chunk this worker holds a lease on, from claim to submission."""

    task: ClaimedTask
    context: TaskContext
    lease_seconds: float
    thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def key(self) -> tuple:
        """Identify the attempt: the same task may come back to this worker as a new attempt."""
        return (self.task.task_id, self.task.attempt)


class Worker:
    """Claims chunks into free slots, runs each in its own thread, keeps their leases alive."""

    def __init__(
        self,
        client: CoordinatorClient,
        config: WorkerConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        handlers: dict[str, Handler] | None = None,
        rng: Callable[[], float] = random.random,
        wall_clock: Callable[[], float] = time.time,
        hard_exit: Callable[[int], None] = os._exit,
    ):
        self.client = client
        self.config = config
        self.handlers = handlers if handlers is not None else load_handlers(config.workloads)
        self.heartbeats = HeartbeatSchedule()
        self._clock = clock
        self._sleep = sleep
        self._rng = rng
        self._wall_clock = wall_clock
        self._hard_exit = hard_exit
        self._claim_backoff = Backoff(config.claim_backoff_base, config.claim_backoff_cap, rng=rng)
        self._running: dict[tuple, RunningChunk] = {}
        self._slots = threading.Condition()
        self._claimed = 0
        # Plain attributes, not Events: the signal handler sets them, and it must never wait on
        # a lock the interrupted main thread might be holding.
        self._stopping = False
        self._stop_deadline: float | None = None
        self._exit_status = 0
        self._heartbeats_done = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None

    # -- state ------------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """How many chunks are between claim and submission."""
        with self._slots:
            return len(self._running)

    @property
    def claimed(self) -> int:
        """How many chunks this worker has claimed since it started."""
        return self._claimed

    @property
    def stopping(self) -> bool:
        """Whether a warm stop was asked for."""
        return self._stopping

    def running_chunks(self) -> list[RunningChunk]:
        """Return the chunks in flight."""
        with self._slots:
            return list(self._running.values())

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> int:
        """Loop until told to stop or done (burst, max-tasks); return the exit status."""
        self._start_heartbeats()
        try:
            while self.run_once():
                pass
        finally:
            self._heartbeats_done.set()
        return self._exit_status

    def run_once(self) -> bool:
        """Claim into free slots and start what was claimed; return False when the loop ends."""
        if self._stopping:
            return self._drain_once()
        remaining = self._tasks_left()
        if remaining == 0:
            if self.in_flight == 0:
                self._log(logging.INFO, "shutdown", "max tasks done", reason="max_tasks")
                return False
            self.wait_for_slot()
            return True
        free = self.config.capacity - self.in_flight
        if free <= 0:
            self.wait_for_slot()
            return True
        wanted = free if remaining is None else min(free, remaining)
        return self._claim(wanted)

    def _claim(self, wanted: int) -> bool:
        # Burst claims do not long-poll: "queue empty" should end a burst now, not in 10 s.
        wait_seconds = 0 if self.config.burst else self.config.wait_seconds
        trace_id = new_trace_id()
        started = self._clock()
        try:
            payloads = self.client.claim_tasks(
                worker_id=self.config.worker_id,
                workloads=list(self.config.workloads),
                capacity=wanted,
                wait_seconds=wait_seconds,
                trace_id=trace_id,
            )
        except CoordinatorUnavailable as exc:
            delay = self._claim_backoff.next_delay(exc.retry_after)
            self._log(
                logging.WARNING,
                "backoff",
                f"claim failed, retrying in {delay:.1f}s: {exc}",
                trace_id=trace_id,
                delay_seconds=round(delay, 3),
                failures=self._claim_backoff.failures,
                status=exc.status,
            )
            self._pause(delay)
            return True
        except RequestRejected as exc:
            # A bad token or a request the coordinator will never accept: going on would only
            # repeat it, so stop as if told to and let the supervisor show the failure.
            self._log(
                logging.ERROR,
                "shutdown",
                f"claim rejected: {exc}",
                trace_id=trace_id,
                status=exc.status,
                code=exc.code,
            )
            self._exit_status = 1
            self.request_stop("claim_rejected")
            return True
        self._claim_backoff.reset()

        if not payloads:
            if self.config.burst and self.in_flight == 0:
                self._log(logging.INFO, "shutdown", "queue empty, burst done", reason="burst")
                return False
            elapsed = self._clock() - started
            if elapsed < self.config.idle_poll_seconds:
                self._pause(self.config.idle_poll_seconds - elapsed)
            return True
        if len(payloads) > wanted:
            # The leases are ours either way; running the extra is cheaper than letting them
            # expire, and the coordinator's lease caps are what keep this rare.
            self._log(
                logging.WARNING,
                "claimed",
                f"coordinator leased {len(payloads)} tasks, asked for {wanted}",
                trace_id=trace_id,
            )
        for payload in payloads:
            try:
                task = ClaimedTask.from_payload(payload)
            except (KeyError, TypeError, ValueError) as exc:
                self._log(
                    logging.ERROR,
                    "dropped",
                    f"malformed task in claim response: {exc!r}",
                    trace_id=trace_id,
                )
                continue
            self.dispatch(task, claim_trace_id=trace_id)
        return True

    def _drain_once(self) -> bool:
        if self.in_flight == 0:
            self._log(
                logging.INFO, "shutdown", "stopped, nothing in flight", exit=self._exit_status
            )
            return False
        if self._stop_deadline is not None and self._clock() >= self._stop_deadline:
            abandoned = self.running_chunks()
            for chunk in abandoned:
                chunk.context.stop("shutdown")
            self._log(
                logging.WARNING,
                "shutdown",
                f"grace period over, abandoning {len(abandoned)} chunks to lease expiry",
                abandoned=[str(chunk.task.task_id) for chunk in abandoned],
            )
            return False
        self.wait_for_slot()
        return True

    def _tasks_left(self) -> int | None:
        if self.config.max_tasks is None:
            return None
        return max(0, self.config.max_tasks - self._claimed)

    def wait_for_slot(self, timeout: float = TICK_SECONDS) -> None:
        """Block until a chunk finishes or `timeout` passes."""
        with self._slots:
            self._slots.wait(timeout)

    def wait_until_idle(self, timeout: float) -> bool:
        """Block until nothing is in flight; return whether that happened within `timeout`."""
        deadline = time.monotonic() + timeout
        with self._slots:
            while self._running:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._slots.wait(left)
        return True

    def _pause(self, seconds: float) -> None:
        # In slices, so a warm stop during a long backoff is noticed within a tick; counted,
        # not clocked, so an injected sleep that does not move the clock cannot loop forever.
        slices = max(1, math.ceil(seconds / TICK_SECONDS))
        for _ in range(slices):
            if self._stopping:
                return
            self._sleep(seconds / slices)

    # -- stopping ---------------------------------------------------------------------------

    def request_stop(self, reason: str = "requested") -> None:
        """Stop claiming; finish what is in flight within the grace period."""
        if self._stopping:
            return
        self._stopping = True
        self._stop_deadline = self._clock() + self.config.grace_seconds
        self._log(
            logging.INFO,
            "shutdown",
            f"warm stop ({reason}): no more claims, {self.config.grace_seconds:g}s grace",
            reason=reason,
        )

    def handle_signal(self, signum: int, frame: object = None) -> None:
        """First SIGTERM: warm stop. A second SIGTERM, or SIGINT: exit at once."""
        if signum == signal.SIGTERM and not self._stopping:
            self.request_stop(signal.Signals(signum).name)
            return
        self._log(
            logging.WARNING,
            "shutdown",
            f"cold stop ({signal.Signals(signum).name}): leases left to expire",
            reason="cold",
            in_flight=len(self._running),
        )
        _flush_logs()
        self._hard_exit(128 + signum)

    # -- one chunk --------------------------------------------------------------------------

    def dispatch(self, task: ClaimedTask, *, claim_trace_id: str | None = None) -> RunningChunk:
        """Take a claimed task into a slot, schedule its heartbeats and start its thread."""
        now = self._clock()
        context = TaskContext(task, open_input=lambda: self._open_input(task))
        chunk = RunningChunk(
            task=task,
            context=context,
            lease_seconds=self._lease_seconds(task),
        )
        with self._slots:
            self._running[chunk.key] = chunk
            self._claimed += 1
        self.heartbeats.add(chunk.key, now + task.heartbeat_seconds)
        with log_scope(**task.log_fields()):
            self._log(
                logging.INFO,
                "claimed",
                f"claimed chunk {task.chunk_index} of job {task.job_id}",
                workload=task.workload,
                chunk_index=task.chunk_index,
                resumed_from=(task.checkpoint or {}).get("records_done"),
                claim_trace_id=claim_trace_id,
            )
        chunk.thread = threading.Thread(
            target=self._chunk_thread, args=(chunk,), name=f"chunk-{task.task_id}", daemon=True
        )
        chunk.thread.start()
        return chunk

    def _open_input(self, task: ClaimedTask):
        return self.client.stream_input(
            task.input_uri,
            worker_id=self.config.worker_id,
            attempt=task.attempt,
            trace_id=task.trace_id,
        )

    def _lease_seconds(self, task: ClaimedTask) -> float:
        fallback = 3 * task.heartbeat_seconds
        if not task.lease_expires_at:
            return fallback
        try:
            expires = datetime.fromisoformat(task.lease_expires_at)
        except (TypeError, ValueError):
            return fallback
        if expires.tzinfo is None:
            expires = expires.replace(tzinfo=UTC)
        # Hosts' clocks disagree; keep the estimate within what a sane lease could be.
        remaining = expires.timestamp() - self._wall_clock()
        return min(max(remaining, task.heartbeat_seconds), 10 * task.heartbeat_seconds)

    def _chunk_thread(self, chunk: RunningChunk) -> None:
        with log_scope(worker_id=self.config.worker_id, **chunk.task.log_fields()):
            try:
                self.process(chunk)
            except Exception:
                self._log(logging.ERROR, "dropped", "chunk thread failed", exc_info=True)
            finally:
                self.heartbeats.remove(chunk.key)
                chunk.context.close_input()
                with self._slots:
                    self._running.pop(chunk.key, None)
                    self._slots.notify_all()

    def process(self, chunk: RunningChunk) -> None:
        """Compute one chunk, then submit its result or report its failure."""
        task, context = chunk.task, chunk.context
        started = self._clock()
        try:
            handler = self.handlers.get(task.workload)
            if handler is None:
                raise UnknownWorkload(f"this worker has no handler for {task.workload!r}")
            body = handler(task, context)
            context.finish_input()
        except ChunkStopped as exc:
            self._log(logging.WARNING, "dropped", f"chunk stopped: {exc.reason}", reason=exc.reason)
            return
        except LeaseLost as exc:
            self._lease_lost(chunk, exc, during="input")
            return
        except InputUnavailable as exc:
            self._fail(chunk, "input_unavailable", exc.message, retryable=True, details=exc.details)
            return
        except InvalidInput as exc:
            self._invalid_input(chunk, exc)
            return
        except Exception as exc:
            self._fail(
                chunk,
                "worker_error",
                f"{type(exc).__name__}: {exc}",
                retryable=True,
                details={
                    "exception": type(exc).__name__,
                    "traceback": traceback.format_exc()[-4000:],
                },
                exc_info=True,
            )
            return

        result = {**body, "metrics": self._metrics(chunk, body.get("metrics"), started)}
        self._log(
            logging.INFO,
            "computed",
            "chunk computed",
            records=result["metrics"].get("records"),
            elapsed_seconds=result["metrics"]["elapsed_seconds"],
        )
        self._inject_fault(chunk)
        self._deliver(
            chunk,
            "result",
            lambda: self.client.submit_result(
                task.task_id,
                worker_id=self.config.worker_id,
                attempt=task.attempt,
                result=result,
                trace_id=task.trace_id,
            ),
            on_rejected=lambda exc: self._result_rejected(chunk, exc),
        )

    def _result_rejected(self, chunk: RunningChunk, exc: RequestRejected) -> None:
        # Left alone the chunk would wait out its lease before anyone retried it; saying so
        # frees it now, and the coordinator's attempt budget still bounds the retries.
        self._fail(
            chunk,
            "worker_error",
            f"coordinator rejected the result: {exc.message}",
            retryable=True,
            details={"status": exc.status, "code": exc.code, "details": exc.details},
        )

    def _invalid_input(self, chunk: RunningChunk, error: InvalidInput) -> None:
        # Only bytes that match input_sha256 may be called invalid; a corrupted transfer is
        # worth another attempt, bad data is not.
        try:
            chunk.context.finish_input()
        except InputUnavailable as exc:
            self._fail(chunk, "input_unavailable", exc.message, retryable=True, details=exc.details)
            return
        except ChunkStopped as exc:
            self._log(logging.WARNING, "dropped", f"chunk stopped: {exc.reason}", reason=exc.reason)
            return
        except LeaseLost as exc:
            self._lease_lost(chunk, exc, during="input")
            return
        self._fail(chunk, "invalid_input", error.message, retryable=False, details=error.details)

    def _metrics(self, chunk: RunningChunk, extra: dict | None, started: float) -> dict:
        metrics = dict(extra or {})
        metrics.setdefault("records", 0)
        metrics.setdefault("bytes", chunk.context.bytes_read)
        metrics["elapsed_seconds"] = round(self._clock() - started, 6)
        metrics["peak_rss_bytes"] = peak_rss_bytes()
        return metrics

    def _inject_fault(self, chunk: RunningChunk) -> None:
        fault = self.config.fault
        if fault is None:
            return
        if fault.point == CRASH_AFTER_COMPUTE:
            self._log(
                logging.WARNING, "fault", "injected fault: exit before submit", fault=fault.point
            )
            _flush_logs()
            self._hard_exit(CRASH_EXIT_STATUS)
        elif fault.point == PAUSE_AFTER_COMPUTE:
            self.heartbeats.remove(chunk.key)
            self._log(
                logging.WARNING,
                "fault",
                f"injected fault: no heartbeats for {fault.seconds:g}s, then submit",
                fault=fault.point,
                seconds=fault.seconds,
            )
            self._sleep(fault.seconds)

    def _fail(
        self,
        chunk: RunningChunk,
        error_code: str,
        message: str,
        *,
        retryable: bool,
        details: dict,
        exc_info: bool = False,
    ) -> None:
        task = chunk.task
        # The coordinator refuses longer messages; the details keep the whole story.
        message = (
            message if len(message) <= MAX_ERROR_MESSAGE else message[: MAX_ERROR_MESSAGE - 1] + "…"
        )
        self._log(
            logging.ERROR if exc_info else logging.WARNING,
            "failed",
            f"{error_code}: {message}",
            exc_info=exc_info,
            error_code=error_code,
            retryable=retryable,
        )
        self._deliver(
            chunk,
            "failure",
            lambda: self.client.report_failure(
                task.task_id,
                worker_id=self.config.worker_id,
                attempt=task.attempt,
                error_code=error_code,
                error_message=message,
                retryable=retryable,
                details=details,
                trace_id=task.trace_id,
            ),
        )

    def _deliver(
        self,
        chunk: RunningChunk,
        what: str,
        send: Callable[[], object],
        *,
        on_rejected: Callable[[RequestRejected], None] | None = None,
    ) -> bool:
        """Send a result or failure, retrying while the coordinator is unavailable."""
        context = chunk.context
        backoff = Backoff(
            self.config.submit_backoff_base, self.config.submit_backoff_cap, rng=self._rng
        )
        # Past about one lease time the coordinator has certainly given the chunk to someone
        # else, so a late submission could only be refused.
        give_up_at = self._clock() + chunk.lease_seconds
        while True:
            if context.stop_reason is not None:
                self._log(
                    logging.WARNING,
                    "dropped",
                    f"not sent: chunk stopped ({context.stop_reason})",
                    reason=context.stop_reason,
                )
                return False
            try:
                send()
            except LeaseLost as exc:
                self._lease_lost(chunk, exc, during=what)
                return False
            except RequestRejected as exc:
                self._log(
                    logging.ERROR,
                    "dropped",
                    f"coordinator rejected the {what}: {exc}",
                    status=exc.status,
                    code=exc.code,
                )
                if on_rejected is not None:
                    on_rejected(exc)
                return False
            except CoordinatorUnavailable as exc:
                delay = backoff.next_delay(exc.retry_after)
                if self._clock() + delay >= give_up_at:
                    self._log(
                        logging.ERROR,
                        "dropped",
                        f"coordinator unavailable until the lease ran out: {exc}",
                        tries=backoff.failures,
                    )
                    return False
                self._log(
                    logging.WARNING,
                    "backoff",
                    f"sending the {what} failed, retrying in {delay:.1f}s: {exc}",
                    delay_seconds=round(delay, 3),
                    tries=backoff.failures,
                    status=exc.status,
                )
                self._sleep(delay)
                continue
            # Done with the lease: a beat racing the finish would only earn a spurious 409.
            self.heartbeats.remove(chunk.key)
            event = "submitted" if what == "result" else "failure_reported"
            self._log(logging.INFO, event, f"{what} sent")
            return True

    def _lease_lost(self, chunk: RunningChunk, exc: LeaseLost, *, during: str) -> None:
        chunk.context.stop(exc.code or "lease_lost")
        self._log(
            logging.WARNING,
            "lease_lost",
            f"lease lost during {during} ({exc.code}); dropping the chunk",
            code=exc.code,
            during=during,
        )

    # -- heartbeats -------------------------------------------------------------------------

    def send_due_heartbeats(self, now: float | None = None) -> int:
        """Renew every lease whose heartbeat is due at `now`; return how many were attempted."""
        now = self._clock() if now is None else now
        sent = 0
        for key in self.heartbeats.due(now):
            with self._slots:
                chunk = self._running.get(key)
            if chunk is None:
                self.heartbeats.remove(key)
                continue
            with log_scope(worker_id=self.config.worker_id, **chunk.task.log_fields()):
                try:
                    self._beat(chunk, now)
                except Exception:
                    # The heartbeat thread serves every chunk; one bad beat must not end it.
                    self._log(logging.ERROR, "heartbeat", "heartbeat failed", exc_info=True)
                    self.heartbeats.reschedule(key, now + HEARTBEAT_RETRY_SECONDS)
            sent += 1
        return sent

    def _beat(self, chunk: RunningChunk, now: float) -> None:
        task, context = chunk.task, chunk.context
        pending = context.unsent_checkpoint()
        try:
            self.client.heartbeat(
                task.task_id,
                worker_id=self.config.worker_id,
                attempt=task.attempt,
                checkpoint=pending[1] if pending else None,
                trace_id=task.trace_id,
            )
        except LeaseLost as exc:
            self.heartbeats.remove(chunk.key)
            self._lease_lost(chunk, exc, during="heartbeat")
            return
        except RequestRejected as exc:
            # Nothing will make this lease renewable again, so computing on would be wasted.
            self.heartbeats.remove(chunk.key)
            chunk.context.stop(exc.code or "heartbeat_rejected")
            self._log(
                logging.ERROR,
                "lease_lost",
                f"heartbeat rejected: {exc}",
                status=exc.status,
                code=exc.code,
            )
            return
        except CoordinatorUnavailable as exc:
            retry_in = min(task.heartbeat_seconds, HEARTBEAT_RETRY_SECONDS)
            self.heartbeats.reschedule(chunk.key, now + retry_in)
            self._log(
                logging.WARNING,
                "heartbeat",
                f"heartbeat failed, retrying in {retry_in:g}s: {exc}",
                status=exc.status,
            )
            return
        if pending:
            context.checkpoint_sent(pending[0])
        self.heartbeats.reschedule(chunk.key, now + task.heartbeat_seconds)
        self._log(
            logging.INFO,
            "heartbeat",
            "lease renewed",
            checkpoint_records=pending[1].get("records_done") if pending else None,
        )

    def _start_heartbeats(self) -> None:
        self._heartbeats_done.clear()
        self._heartbeat_thread = threading.Thread(
            target=self._heartbeat_loop, name="heartbeats", daemon=True
        )
        self._heartbeat_thread.start()

    def _heartbeat_loop(self) -> None:
        with log_scope(worker_id=self.config.worker_id):
            while not self._heartbeats_done.is_set():
                self.send_due_heartbeats()
                next_due = self.heartbeats.next_due()
                wait = TICK_SECONDS
                if next_due is not None:
                    wait = min(max(next_due - self._clock(), 0.01), TICK_SECONDS)
                self._heartbeats_done.wait(wait)

    # -- logging ----------------------------------------------------------------------------

    def _log(self, level: int, event: str, message: str, *, exc_info: bool = False, **fields):
        fields = {k: v for k, v in fields.items() if v is not None}
        logger.log(
            level,
            message,
            exc_info=exc_info,
            extra={"event": event, "worker_id": self.config.worker_id, **fields},
        )


def _flush_logs() -> None:
    for handler in logging.getLogger().handlers:
        # About to exit: a handler that cannot flush must not prevent it.
        with contextlib.suppress(Exception):
            handler.flush()


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="chunkwise-worker", description="Claim and run Chunkwise chunks."
    )
    parser.add_argument(
        "--coordinator",
        default=os.environ.get("CHUNKWISE_URL"),
        help="coordinator base URL (default: $CHUNKWISE_URL)",
    )
    parser.add_argument("--worker-id", help="default: <hostname>-<pid>-<6 random hex>")
    parser.add_argument("--capacity", type=int, default=2, help="chunks run at once")
    parser.add_argument(
        "--workloads",
        nargs="+",
        default=["csv_stats"],
        help="workloads to claim (space or comma separated)",
    )
    parser.add_argument("--burst", action="store_true", help="exit once the queue is empty")
    parser.add_argument("--max-tasks", type=int, help="exit after running this many chunks")
    parser.add_argument(
        "--fault",
        type=_fault_arg,
        help="for tests: crash-after-compute or pause-after-compute=SECONDS",
    )
    parser.add_argument("--grace-seconds", type=float, default=30.0)
    parser.add_argument("--wait-seconds", type=float, default=10.0, help="long-poll time, 0-30")
    parser.add_argument("--log-level", default="INFO")
    return parser.parse_args(argv)


def _fault_arg(text: str) -> Fault:
    try:
        return Fault.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def main(argv: list[str] | None = None) -> int:
    """Run the chunkwise-worker command; return its exit status."""
    args = _parse_args(argv)
    token = os.environ.get("CHUNKWISE_WORKER_TOKEN")
    if not token:
        print("chunkwise-worker: CHUNKWISE_WORKER_TOKEN is not set", file=sys.stderr)
        return 2
    if not args.coordinator:
        print("chunkwise-worker: give --coordinator URL or set CHUNKWISE_URL", file=sys.stderr)
        return 2
    workloads = tuple(w for item in args.workloads for w in item.split(",") if w)
    try:
        config = WorkerConfig(
            worker_id=args.worker_id or default_worker_id(),
            workloads=workloads,
            capacity=args.capacity,
            wait_seconds=args.wait_seconds,
            burst=args.burst,
            max_tasks=args.max_tasks,
            grace_seconds=args.grace_seconds,
            fault=args.fault,
        )
        handlers = load_handlers(config.workloads)
    except (ValueError, UnknownWorkload) as exc:
        print(f"chunkwise-worker: {exc}", file=sys.stderr)
        return 2

    configure_logging(worker_id=config.worker_id, level=args.log_level.upper())
    client = CoordinatorClient(args.coordinator, token)
    worker = Worker(client, config, handlers=handlers)
    signal.signal(signal.SIGTERM, worker.handle_signal)
    signal.signal(signal.SIGINT, worker.handle_signal)
    logger.info(
        "worker started",
        extra={
            "event": "started",
            "worker_id": config.worker_id,
            "coordinator": args.coordinator,
            "workloads": list(config.workloads),
            "capacity": config.capacity,
        },
    )
    try:
        return worker.run()
    finally:
        client.close()
