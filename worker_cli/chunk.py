"""One leased chunk: compute it, keep its lease alive, then submit its result or its failure."""

from __future__ import annotations

import logging
import re
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from worker_cli.client import (
    MAX_BATCH,
    CoordinatorClient,
    CoordinatorError,
    CoordinatorUnavailable,
    LeaseLost,
    RequestRejected,
    rejection_of,
)
from worker_cli.handlers import (
    ChunkStopped,
    ClaimedTask,
    Handler,
    InputRejected,
    InputUnavailable,
    RetryLater,
    TaskContext,
    UnknownWorkload,
)
from worker_cli.logs import log_scope
from worker_cli.process import peak_rss_bytes
from worker_cli.results import ResultBatcher
from worker_cli.return_values import ResultRefused, result_body
from worker_cli.schedule import Backoff, HeartbeatSchedule
from worker_cli.worker_config import WorkerConfig

HEARTBEAT_RETRY_SECONDS = 2.0
# How long after its deadline a timed-out chunk's heartbeat goes: past it on the
# coordinator's clock, though the two clocks differ a little.
DEADLINE_BEAT_DELAY = 0.5
MAX_ERROR_MESSAGE = 4000
# What the coordinator refuses in any string (NUL, an unpaired surrogate; app/input_rules.py).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def seconds_to_deadline(task: ClaimedTask, wall_clock: Callable[[], float]) -> float | None:
    """How long the attempt has until its job's timeout ends it, or None without a timeout."""
    remaining = _seconds_until(task.deadline, wall_clock)
    return None if remaining is None else max(0.0, remaining)


def lease_seconds_left(task: ClaimedTask, wall_clock: Callable[[], float]) -> float:
    """Estimate how long the task's lease has left, from its expiry on the coordinator's clock."""
    remaining = _seconds_until(task.lease_expires_at, wall_clock)
    if remaining is None:
        return 3 * task.heartbeat_seconds
    # Hosts' clocks disagree; keep the estimate within what a sane lease could be.
    return min(max(remaining, task.heartbeat_seconds), 10 * task.heartbeat_seconds)


def _seconds_until(moment: str | None, wall_clock: Callable[[], float]) -> float | None:
    """Seconds from now to a time the coordinator sent (ISO 8601), or None if it sent none."""
    if not moment:
        return None
    try:
        at = datetime.fromisoformat(moment)
    except (TypeError, ValueError):
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.timestamp() - wall_clock()


@dataclass
class RunningChunk:
    """A chunk this worker holds a lease on, from claim to submission."""

    task: ClaimedTask
    context: TaskContext
    lease_seconds: float
    # When, on this worker's monotonic clock, the job's timeout ends the attempt (None: never).
    deadline_at: float | None = None
    thread: threading.Thread | None = field(default=None, repr=False)

    def next_beat(self, now: float) -> float:
        """When to renew the lease next: a heartbeat interval on, or just past the deadline if
        that comes first, so the coordinator's timed_out stops the chunk then, not later."""
        due = now + self.task.heartbeat_seconds
        if self.deadline_at is not None and now < self.deadline_at + DEADLINE_BEAT_DELAY:
            due = min(due, self.deadline_at + DEADLINE_BEAT_DELAY)
        return due

    @property
    def key(self) -> tuple:
        """Identify the attempt: the same task may come back to this worker as a new attempt."""
        return (self.task.task_id, self.task.attempt)


class ResumingInput:
    """A chunk's input that rides out coordinator blips: reopened, skipping what it passed on."""

    # A reopened stream asks for the bytes from where the last one was cut (a Range); from a
    # coordinator that ignores it, the stream starts at the first byte again and the bytes the
    # handler already has are read and dropped. TaskContext checks input_sha256 over exactly
    # the bytes the handler was given, so changed bytes still fail.

    def __init__(
        self,
        open_stream: Callable[[int], Iterable[bytes]],
        *,
        backoff: Backoff,
        patience: float,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        log: Callable[..., None],
    ):
        self._open_stream = open_stream
        self._backoff = backoff
        self._patience = patience
        self._clock = clock
        self._sleep = sleep
        self._log = log
        self._stream: Iterable[bytes] | None = None

    def __iter__(self) -> Iterator[bytes]:
        delivered = 0
        outage_began: float | None = None
        while True:
            try:
                self._stream = self._open_stream(delivered)
                skip = delivered - getattr(self._stream, "first_byte", 0)
                for block in self._stream:
                    if skip >= len(block):
                        skip -= len(block)
                        continue
                    block, skip = block[skip:], 0
                    delivered += len(block)
                    outage_began = None
                    self._backoff.reset()
                    yield block
                return
            except RequestRejected as exc:
                # Cut after its last byte: a range from there is past the end, and none is left.
                if exc.status == 416 and delivered:
                    return
                raise
            except CoordinatorUnavailable as exc:
                if not exc.is_blip:
                    raise
                self.close()
                now = self._clock()
                outage_began = now if outage_began is None else outage_began
                delay = self._backoff.next_delay(exc.retry_after)
                if now + delay - outage_began >= self._patience:
                    # By now the lease has run out; another worker will get the chunk, and a
                    # failure report could only be refused.
                    raise ChunkStopped("coordinator_unavailable") from exc
                self._log(
                    logging.WARNING,
                    "backoff",
                    f"reading the input failed at byte {delivered}, retrying in {delay:.1f}s: "
                    f"{exc}",
                    during="input",
                    delay_seconds=round(delay, 3),
                    tries=self._backoff.failures,
                    status=exc.status,
                    resume_at_byte=delivered,
                )
                self._sleep(delay)

    def close(self) -> None:
        """Release the current stream's connection, if one is open."""
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


class ChunkRunner:
    """Runs each claimed chunk: streams its input, computes, renews its lease, sends the outcome."""

    def __init__(
        self,
        client: CoordinatorClient,
        config: WorkerConfig,
        handlers: dict[str, Handler],
        heartbeats: HeartbeatSchedule,
        *,
        log: Callable[..., None],
        after_compute: Callable[[RunningChunk], None],
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        rng: Callable[[], float],
        wall_clock: Callable[[], float] = time.time,
    ):
        self.client = client
        self.config = config
        self.handlers = handlers
        self.heartbeats = heartbeats
        # The worker's log funnel: these lines keep its logger name and its worker_id field.
        self._log = log
        self._after_compute = after_compute
        self._clock = clock
        self._sleep = sleep
        self._rng = rng
        self._wall_clock = wall_clock
        self.results = ResultBatcher(client, config.worker_id)

    def _fence(self, task: ClaimedTask) -> dict:
        # Every call about a chunk names its attempt, so the coordinator can refuse a stale one,
        # and carries its lease token, which alone proves the lease is this worker's.
        return {
            "worker_id": self.config.worker_id,
            "attempt": task.attempt,
            "lease_token": task.lease_token,
            "trace_id": task.trace_id,
        }

    def open_input(self, task: ClaimedTask) -> Iterable[bytes]:
        """Stream the task's input from the coordinator, reopening it after a blip; a task's
        args are its input, and came with the claim."""
        if task.args is not None:
            return [task.args.encode()]
        return ResumingInput(
            lambda start: self.client.stream_input(
                task.input_uri, start=start, **self._fence(task)
            ),
            backoff=Backoff(
                self.config.submit_backoff_base, self.config.submit_backoff_cap, rng=self._rng
            ),
            # Opened right after the claim, so this is about the whole lease.
            patience=lease_seconds_left(task, self._wall_clock),
            clock=self._clock,
            sleep=self._sleep,
            log=self._log,
        )

    def process(self, chunk: RunningChunk) -> None:
        """Compute one chunk, then submit its result or report its failure."""
        task, context = chunk.task, chunk.context
        started = self._clock()
        try:
            handler = self.handlers.get(task.workload)
            if handler is None:
                raise UnknownWorkload(f"this worker has no handler for {task.workload!r}")
            returned = handler(task, context)
            context.finish_input()
            body = result_body(returned, task.max_result_bytes)
        except (ChunkStopped, LeaseLost, InputUnavailable) as exc:
            self._cut_short(chunk, exc)
            return
        except InputRejected as exc:
            self._invalid_input(chunk, exc)
            return
        except RetryLater as exc:
            self._fail(
                chunk,
                "retry_later",
                exc.message,
                retryable=True,
                details={},
                retry_after_seconds=exc.seconds,
            )
            return
        except ResultRefused as exc:
            self._fail(chunk, exc.code, exc.message, retryable=False, details=exc.details)
            return
        except BaseException as exc:
            # Any exception, and a KeyboardInterrupt or SystemExit raised in the handler too:
            # in a chunk's thread it can stop nothing but this chunk, which must not then wait
            # out its lease unreported. A real Ctrl-C reaches the main thread, as a signal.
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
        self._after_compute(chunk)
        self._deliver(
            chunk,
            "result",
            lambda: self.results.submit(
                task.task_id,
                attempt=task.attempt,
                lease_token=task.lease_token,
                result=result,
                trace_id=task.trace_id,
            ),
            on_rejected=lambda exc: self._result_rejected(chunk, exc),
        )

    def _cut_short(
        self, chunk: RunningChunk, exc: ChunkStopped | LeaseLost | InputUnavailable
    ) -> None:
        # The handler and the final read of the input end a chunk early in the same three ways.
        if isinstance(exc, ChunkStopped):
            self._log(logging.WARNING, "dropped", f"chunk stopped: {exc.reason}", reason=exc.reason)
        elif isinstance(exc, LeaseLost):
            self._lease_lost(chunk, exc, during="input")
            reason = exc.code or "lease_lost"
            self._log(logging.WARNING, "dropped", f"chunk stopped: {reason}", reason=reason)
        else:
            self._fail(chunk, "input_unavailable", exc.message, retryable=True, details=exc.details)

    def _result_rejected(self, chunk: RunningChunk, exc: RequestRejected) -> None:
        # Left alone the chunk would wait out its lease before anyone retried it; saying so
        # frees it now, and the coordinator's attempt budget still bounds the retries.
        if exc.code == "result_too_large":
            # A coordinator that did not say its limit in the claim: no retry makes it fit.
            self._fail(chunk, exc.code, exc.message, retryable=False, details=exc.details)
            return
        self._fail(
            chunk,
            "worker_error",
            f"coordinator rejected the result: {exc.message}",
            retryable=True,
            details={"status": exc.status, "code": exc.code, "details": exc.details},
        )

    def _invalid_input(self, chunk: RunningChunk, error: InputRejected) -> None:
        # Only bytes that match input_sha256 may be called invalid; a corrupted transfer is
        # worth another attempt, bad data is not.
        try:
            chunk.context.finish_input()
        except (ChunkStopped, LeaseLost, InputUnavailable) as exc:
            self._cut_short(chunk, exc)
            return
        self._fail(chunk, "invalid_input", error.message, retryable=False, details=error.details)

    def _metrics(self, chunk: RunningChunk, extra: dict | None, started: float) -> dict:
        metrics = dict(extra or {})
        metrics.setdefault("records", 0)
        metrics.setdefault("bytes", chunk.context.bytes_read)
        metrics["elapsed_seconds"] = round(self._clock() - started, 6)
        metrics["peak_rss_bytes"] = peak_rss_bytes()
        return metrics

    def _fail(
        self,
        chunk: RunningChunk,
        error_code: str,
        message: str,
        *,
        retryable: bool,
        details: dict,
        exc_info: bool = False,
        retry_after_seconds: float | None = None,
    ) -> None:
        task = chunk.task
        # An exception's text is anyone's: what the coordinator would refuse must not cost the
        # report (a refused one leaves the chunk to wait out its lease). It refuses longer
        # messages too; the details keep the whole story.
        message, details = _storable(message), _storable(details)
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
                error_code=error_code,
                error_message=message,
                retryable=retryable,
                details=details,
                retry_after_seconds=retry_after_seconds,
                **self._fence(task),
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
                    during=what,
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

    def renew_all(self, chunks: list[RunningChunk], now: float) -> None:
        """Send the chunks' heartbeats, each with any unsent checkpoint, in as few calls as the
        coordinator allows; schedule each chunk's next beat by its own answer."""
        for first in range(0, len(chunks), MAX_BATCH):
            self._renew_batch(chunks[first : first + MAX_BATCH], now)

    def _renew_batch(self, chunks: list[RunningChunk], now: float) -> None:
        sent = [chunk.context.unsent_checkpoint() for chunk in chunks]
        items = [
            {
                "task_id": chunk.task.task_id,
                "attempt": chunk.task.attempt,
                "lease_token": chunk.task.lease_token,
                **({"checkpoint": pending[1]} if pending else {}),
            }
            for chunk, pending in zip(chunks, sent, strict=True)
        ]
        try:
            outcomes = self.client.renew_leases(
                worker_id=self.config.worker_id,
                heartbeats=items,
                # The first chunk's attempt names the call, so one beat alone is traced as before.
                trace_id=chunks[0].task.trace_id,
            )
            answers = [o if o["outcome"] == "renewed" else rejection_of(o) for o in outcomes]
        except CoordinatorError as exc:
            answers = [exc] * len(chunks)  # the whole call failed: each chunk takes it as its own
        for chunk, pending, answer in zip(chunks, sent, answers, strict=True):
            with log_scope(worker_id=self.config.worker_id, **chunk.task.log_fields()):
                self._beat_answered(chunk, pending, answer, now)

    def _beat_answered(
        self,
        chunk: RunningChunk,
        pending: tuple[int, dict] | None,
        answer: dict | CoordinatorError,
        now: float,
    ) -> None:
        task, context = chunk.task, chunk.context
        if isinstance(answer, LeaseLost):
            self.heartbeats.remove(chunk.key)
            self._lease_lost(chunk, answer, during="heartbeat")
            return
        if isinstance(answer, RequestRejected):
            # Nothing will make this lease renewable again, so computing on would be wasted.
            self.heartbeats.remove(chunk.key)
            context.stop(answer.code or "heartbeat_rejected")
            self._log(
                logging.ERROR,
                "lease_lost",
                f"heartbeat rejected: {answer}",
                status=answer.status,
                code=answer.code,
            )
            return
        if isinstance(answer, CoordinatorError):  # unavailable, or an answer no API gives
            retry_in = min(task.heartbeat_seconds, HEARTBEAT_RETRY_SECONDS)
            self.heartbeats.reschedule(chunk.key, now + retry_in)
            self._log(
                logging.WARNING,
                "heartbeat",
                f"heartbeat failed, retrying in {retry_in:g}s: {answer}",
                status=answer.status,
            )
            return
        if pending:
            context.checkpoint_sent(pending[0])
        self.heartbeats.reschedule(chunk.key, chunk.next_beat(now))
        self._log(
            logging.INFO,
            "heartbeat",
            "lease renewed",
            checkpoint_records=pending[1].get("records_done") if pending else None,
        )


def _storable(value):
    """The value with each NUL and unpaired surrogate in its strings and keys made U+FFFD."""
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(v) for v in value]
    return value
