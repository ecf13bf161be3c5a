"""The lease loop: claim chunks into free slots, run each in a thread, heartbeat, submit."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator

from worker_cli.chunk import (
    HEARTBEAT_RETRY_SECONDS,
    ChunkRunner,
    RunningChunk,
    lease_seconds_left,
    seconds_to_deadline,
)
from worker_cli.client import (
    CoordinatorClient,
    CoordinatorError,
    RequestRejected,
    new_trace_id,
    settings_problem,
)
from worker_cli.handlers import (
    ClaimedTask,
    Handler,
    TaskContext,
    UnknownWorkload,
    load_handlers,
    share_cores,
)
from worker_cli.logs import configure_logging, log_scope
from worker_cli.schedule import Backoff, HeartbeatSchedule
from worker_cli.worker_args import config_from_args, parse_args
from worker_cli.worker_config import CRASH_AFTER_COMPUTE, PAUSE_AFTER_COMPUTE, WorkerConfig

logger = logging.getLogger(__name__)

CRASH_EXIT_STATUS = 17
# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
# Longest single wait of the loop and heartbeat threads, so a stop or a new lease is noticed soon.
TICK_SECONDS = 0.5
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class LeaseLoop:
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
        self._wall_clock = wall_clock
        self._hard_exit = hard_exit
        self._claim_backoff = Backoff(config.claim_backoff_base, config.claim_backoff_cap, rng=rng)
        self._running: dict[tuple, RunningChunk] = {}
        self._slots = threading.Condition()
        self._claimed = 0
        # Slots a batch of results in flight is claiming tasks for (complete and fetch).
        self._promised = 0
        self.workloads = list(config.workloads)
        # Plain attributes, not Events: the signal handler sets them, and it must never wait on
        # a lock the interrupted main thread might be holding.
        self._stopping = False
        self._stop_deadline: float | None = None
        self._exit_status = 0
        self._heartbeats_done = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None
        self.runner = ChunkRunner(
            client,
            config,
            self.handlers,
            self.heartbeats,
            log=self._log,
            after_compute=self._inject_fault,
            clock=clock,
            sleep=sleep,
            rng=rng,
        )
        # Each batch of results asks for the tasks the slots it frees can take.
        self.runner.results.refill = self

    # -- state ------------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """How many chunks are between claim and submission."""
        with self._slots:
            return len(self._running)

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
        wanted = self.reserve(0)
        if wanted <= 0:
            self.wait_for_slot()
            return True
        try:
            return self._claim(wanted)
        finally:
            self._release(wanted)

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
        except CoordinatorError as exc:
            # Unavailable, or an answer the API never gives a claim (a 409, a 507, a proxy's
            # page): none says the request is wrong, so ask again after a pause.
            delay = self._claim_backoff.next_delay(getattr(exc, "retry_after", None))
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
        self._claim_backoff.reset()

        if not payloads:
            if self.config.burst and self.in_flight == 0:
                self._log(logging.INFO, "shutdown", "queue empty, burst done", reason="burst")
                return False
            elapsed = self._clock() - started
            if elapsed < self.config.idle_poll_seconds:
                self._pause(self.config.idle_poll_seconds - elapsed)
            return True
        self._start(payloads, wanted, trace_id)
        return True

    def reserve(self, finishing: int) -> int:
        """How many tasks a claim may ask for, held until they are dispatched; 0 if stopping."""
        # A batch of `finishing` chunks' results counts their slots free: those chunks have
        # computed, only their answer is outstanding. Held, so two claims in flight, the
        # loop's and a batch's, never ask for the same slot; within max-tasks too.
        with self._slots:
            if self._stopping:
                return 0
            wanted = self.config.capacity - len(self._running) - self._promised + finishing
            remaining = self._tasks_left()
            if remaining is not None:
                wanted = min(wanted, remaining - self._promised)
            wanted = max(0, wanted)
            self._promised += wanted
            return wanted

    def deliver(self, tasks: list[dict], reserved: int, trace_id: str | None) -> None:
        """Start the tasks a batch of results leased, and give back the slots it held."""
        try:
            self._start(tasks, reserved, trace_id)
        finally:
            self._release(reserved)

    def _release(self, reserved: int) -> None:
        # After dispatching: until then the tasks count as held, after it as running.
        with self._slots:
            self._promised -= reserved

    def _start(self, payloads: list[dict], wanted: int, trace_id: str | None) -> None:
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
        context = TaskContext(task, open_input=lambda: self.runner.open_input(task))
        to_deadline = seconds_to_deadline(task, self._wall_clock)
        chunk = RunningChunk(
            task=task,
            context=context,
            lease_seconds=lease_seconds_left(task, self._wall_clock),
            deadline_at=None if to_deadline is None else now + to_deadline,
        )
        with self._slots:
            self._running[chunk.key] = chunk
            self._claimed += 1
        self.heartbeats.add(chunk.key, chunk.next_beat(now))
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

    def _chunk_thread(self, chunk: RunningChunk) -> None:
        with log_scope(worker_id=self.config.worker_id, **chunk.task.log_fields()):
            try:
                self.runner.process(chunk)
            except Exception:
                self._log(logging.ERROR, "dropped", "chunk thread failed", exc_info=True)
            finally:
                self.heartbeats.remove(chunk.key)
                chunk.context.close_input()
                with self._slots:
                    self._running.pop(chunk.key, None)
                    self._slots.notify_all()

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

    # -- heartbeats -------------------------------------------------------------------------

    def send_due_heartbeats(self, now: float | None = None) -> int:
        """Renew every lease whose heartbeat is due at `now`, together; return how many."""
        now = self._clock() if now is None else now
        chunks = []
        for key in self.heartbeats.due(now):
            with self._slots:
                chunk = self._running.get(key)
            if chunk is None:
                self.heartbeats.remove(key)
            else:
                chunks.append(chunk)
        if not chunks:
            return 0
        try:
            self.runner.renew_all(chunks, now)
        except Exception:
            # The heartbeat thread serves every chunk; one bad call must not end it.
            self._log(logging.ERROR, "heartbeat", "heartbeat failed", exc_info=True)
            for chunk in chunks:
                self.heartbeats.reschedule(chunk.key, now + HEARTBEAT_RETRY_SECONDS)
        return len(chunks)

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


def keep_freed_memory() -> None:
    """Let glibc keep a chunk's freed buffers for the next chunk rather than unmap them.

    A chunk's bytes and numpy's masks, a few MiB each, were above glibc's mmap threshold: each
    was mapped afresh and unmapped when freed, and every fresh page costs a fault (1.7-1.9 µs
    on the VMs measured), about 8,000 a job in each of the report's workers. Blocks up to 32
    MiB now come from the heap, and up to 64 MiB of its free top is kept. MALLOC_MMAP_THRESHOLD_
    or MALLOC_TRIM_THRESHOLD_ in the environment win; a C library without mallopt is left be.
    """
    if {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"} & set(os.environ):
        return
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    mallopt(M_MMAP_THRESHOLD, 32 << 20)
    mallopt(M_TRIM_THRESHOLD, 64 << 20)


def main(argv: list[str] | None = None) -> int:
    """Run the chunkwise-worker command; return its exit status."""
    args = parse_args(argv)
    app = None
    if args.app:
        from worker_cli.tasks import AppNotFound, load_app  # tasks builds on this module

        try:
            app = load_app(args.app)
        except AppNotFound as exc:
            print(f"chunkwise-worker: {exc}", file=sys.stderr)
            return 2
    token = (app and app.token) or os.environ.get("CHUNKWISE_WORKER_TOKEN")
    if not token:
        print("chunkwise-worker: CHUNKWISE_WORKER_TOKEN is not set", file=sys.stderr)
        return 2
    url = args.coordinator or (app and app.url) or os.environ.get("CHUNKWISE_URL")
    if not url:
        print("chunkwise-worker: give --coordinator URL or set CHUNKWISE_URL", file=sys.stderr)
        return 2
    if problem := settings_problem(url, token):
        print(f"chunkwise-worker: {problem}", file=sys.stderr)
        return 2
    try:
        config = config_from_args(args, app.settings() if app else None)
        share_cores(config.capacity)
        keep_freed_memory()
        handlers = app.handlers_for(config.workloads) if app else load_handlers(config.workloads)
    except (ValueError, UnknownWorkload) as exc:
        print(f"chunkwise-worker: {exc}", file=sys.stderr)
        return 2
    configure_logging(worker_id=config.worker_id, level=args.log_level.upper())
    return serve(url, token, config, handlers)


def serve(
    url: str,
    token: str,
    config: WorkerConfig,
    handlers: dict[str, Handler],
    *,
    on_start: Callable[[LeaseLoop], None] | None = None,
) -> int:
    """Run the lease loop against the coordinator until it ends; return the exit status."""
    # From the main thread, SIGTERM asks for a warm stop (a second one, or SIGINT, a cold one)
    # until the loop ends, when the signals' previous handlers come back.
    client = CoordinatorClient(url, token)
    loop = LeaseLoop(client, config, handlers=handlers)
    if on_start is not None:
        on_start(loop)
    logger.info(
        "worker started",
        extra={
            "event": "started",
            "worker_id": config.worker_id,
            "coordinator": url,
            "workloads": list(config.workloads),
            "capacity": config.capacity,
        },
    )
    try:
        with _stop_signals(loop):
            return loop.run()
    finally:
        client.close()


@contextlib.contextmanager
def _stop_signals(loop: LeaseLoop) -> Iterator[None]:
    # Python lets only the main thread set signal handlers; a loop run from another thread is
    # stopped by its owner (Worker.stop) instead.
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, loop.handle_signal) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
