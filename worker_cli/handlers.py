"""Workload handlers: csv_stats built in, others found via the chunkwise.handlers entry points."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from worker_cli.client import CoordinatorUnavailable, RequestRejected, StorageFailed

ENTRY_POINT_GROUP = "chunkwise.handlers"

logger = logging.getLogger(__name__)

# Records between checkpoints: often enough that a retried chunk loses little work, rarely
# enough that the checkpoints (sent on heartbeats) stay a small share of the traffic.
CHECKPOINT_EVERY = 50_000


class ChunkStopped(Exception):
    """The worker told this chunk to stop (lease lost, job cancelled, shutdown)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class InputUnavailable(Exception):
    """The chunk's input cannot be read, or its bytes do not match input_sha256."""

    # Never a coordinator blip (no answer, 429, 502-504): ResumingInput rides those out within
    # the lease, so they do not spend the chunk's read-retry budget.

    def __init__(self, message: str, *, details: dict | None = None):
        super().__init__(message)
        self.message = message
        self.details = details or {}


class InputRejected(Exception):
    """The input was read correctly but is not valid for the workload; retrying cannot help."""

    def __init__(self, message: str, *, details: dict | None = None):
        super().__init__(message)
        self.message = message
        self.details = details or {}


class RetryLater(Exception):
    """Raised by a task that may be done later: its next attempt waits `seconds`."""

    # `seconds` (an upstream's Retry-After, say) stands in for the coordinator's backoff. The
    # attempt is spent all the same.

    def __init__(self, message: str, *, seconds: float):
        super().__init__(message)
        self.message = message
        self.seconds = seconds


class UnknownWorkload(LookupError):
    """No built-in handler and no entry point in chunkwise.handlers has this name."""


@dataclass(frozen=True)
class ClaimedTask:
    """One leased attempt at one chunk, as the claim response described it."""

    task_id: str
    job_id: str
    chunk_index: int
    attempt: int
    attempt_id: str
    trace_id: str
    workload: str
    input_uri: str
    input_sha256: str | None
    heartbeat_seconds: float
    lease_expires_at: str | None = None
    parameters: dict = field(default_factory=dict)
    checkpoint: dict | None = None
    # When the job's timeout_seconds ends this attempt (None: no timeout). Past it the
    # coordinator takes no result, and the next heartbeat stops the chunk (timed_out).
    deadline: str | None = None
    # The lease's secret: every call about this attempt carries it, and it is never logged.
    lease_token: str = field(default="", repr=False)
    # The task's JSON args as the exact text input_sha256 digests (None: its input is at
    # input_uri); TaskContext.args parses them once they are checked.
    args: str | None = field(default=None, repr=False)
    # The most JSON bytes the coordinator stores as a result value (None: it did not say).
    max_result_bytes: int | None = None

    @classmethod
    def from_payload(cls, payload: dict) -> ClaimedTask:
        """Build from one element of the claim response's `tasks`."""
        return cls(
            task_id=payload["task_id"],
            job_id=payload.get("job_id"),
            chunk_index=payload.get("chunk_index"),
            attempt=payload["attempt"],
            attempt_id=payload.get("attempt_id"),
            trace_id=payload.get("trace_id"),
            workload=payload["workload"],
            input_uri=payload.get("input_uri"),
            input_sha256=payload.get("input_sha256"),
            heartbeat_seconds=float(payload.get("heartbeat_seconds") or 10),
            lease_expires_at=payload.get("lease_expires_at"),
            parameters=dict(payload.get("parameters") or {}),
            checkpoint=payload.get("checkpoint"),
            deadline=payload.get("deadline"),
            lease_token=payload.get("lease_token", ""),
            args=payload.get("args"),
            max_result_bytes=payload.get("max_result_bytes"),
        )

    def log_fields(self) -> dict:
        """The ids every log line about this attempt carries."""
        return {
            "trace_id": self.trace_id,
            "job_id": self.job_id,
            "task_id": self.task_id,
            "attempt_id": self.attempt_id,
            "attempt": self.attempt,
        }


class TaskContext:
    """A running chunk's link to the worker: its verified input, its checkpoints, its stop flag."""

    def __init__(self, task: ClaimedTask, *, open_input: Callable[[], Iterable[bytes]]):
        self.task = task
        self.bytes_read = 0
        self._open_input = open_input
        self._lock = threading.Lock()
        self._stop_reason: str | None = None
        self._checkpoint: dict | None = None
        self._checkpoint_seq = 0
        self._sent_seq = 0
        self._blocks: Iterator[bytes] | None = None
        self._stream: Iterable[bytes] | None = None
        self._verified = False
        self._args: object = None

    # -- input ------------------------------------------------------------------------------

    @property
    def args(self) -> object:
        """The task's JSON args, once their bytes match input_sha256 (None without args)."""
        # InputUnavailable when they do not: the args changed on the way, and another attempt
        # may get them whole.
        if self.task.args is None or self._args is not None:
            return self._args
        data = self.task.args.encode()
        actual = hashlib.sha256(data).hexdigest()
        expected = (self.task.input_sha256 or "").lower()
        if actual != expected:
            raise InputUnavailable(
                "args digest mismatch",
                details={"expected_sha256": expected, "actual_sha256": actual, "bytes": len(data)},
            )
        self._args = json.loads(data)
        return self._args

    def read_input(self) -> Iterator[bytes]:
        """Stream the input; at its end raise InputUnavailable if the SHA-256 does not match."""
        if self._blocks is not None:
            raise RuntimeError("the input of a chunk can be read only once")
        self._blocks = self._verified_blocks()
        return self._blocks

    def finish_input(self) -> None:
        """Read whatever the handler left unread, so no result stands on unverified bytes."""
        if self._blocks is None:
            return
        for _ in self._blocks:
            pass
        if not self._verified:
            raise InputUnavailable("input was not read to its end")

    def close_input(self) -> None:
        """Release the input connection, if one is open."""
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()

    def _verified_blocks(self) -> Iterator[bytes]:
        digest = hashlib.sha256()
        try:
            self.raise_if_stopped()
            self._stream = self._open_input()
            for block in self._stream:
                # Checked per block too, so a cancelled chunk stops between checkpoints.
                self.raise_if_stopped()
                digest.update(block)
                self.bytes_read += len(block)
                yield block
        except ValueError as exc:  # an input_uri the coordinator does not serve
            # Only the stream raises in here: the handler's own errors stay with the handler.
            raise InputUnavailable(str(exc)) from exc
        except (CoordinatorUnavailable, RequestRejected, StorageFailed) as exc:
            # What reaches here is no blip: ResumingInput retried those.
            raise InputUnavailable(
                f"could not read input: {exc}",
                details={"status": exc.status, "code": exc.code},
            ) from exc
        finally:
            self.close_input()
        expected = (self.task.input_sha256 or "").lower()
        actual = digest.hexdigest()
        if expected and actual != expected:
            raise InputUnavailable(
                "input digest mismatch",
                details={
                    "expected_sha256": expected,
                    "actual_sha256": actual,
                    "bytes": self.bytes_read,
                },
            )
        self._verified = True

    # -- checkpoints ------------------------------------------------------------------------

    def save_checkpoint(self, checkpoint: dict) -> None:
        """Keep the checkpoint for the next heartbeat; raise ChunkStopped if told to stop."""
        with self._lock:
            self._checkpoint = checkpoint
            self._checkpoint_seq += 1
        self.raise_if_stopped()

    def unsent_checkpoint(self) -> tuple[int, dict] | None:
        """Return (sequence, checkpoint) if one was saved since the last one sent."""
        with self._lock:
            if self._checkpoint_seq == self._sent_seq or self._checkpoint is None:
                return None
            return self._checkpoint_seq, self._checkpoint

    def checkpoint_sent(self, seq: int) -> None:
        """Record that the checkpoint with this sequence number reached the coordinator."""
        with self._lock:
            self._sent_seq = max(self._sent_seq, seq)

    # -- stopping ---------------------------------------------------------------------------

    def stop(self, reason: str) -> None:
        """Ask the handler to stop at its next block or checkpoint."""
        with self._lock:
            if self._stop_reason is None:
                self._stop_reason = reason

    @property
    def stop_reason(self) -> str | None:
        """Why the chunk was told to stop, or None."""
        return self._stop_reason

    def raise_if_stopped(self) -> None:
        """Raise ChunkStopped if the worker told this chunk to stop."""
        reason = self._stop_reason
        if reason is not None:
            raise ChunkStopped(reason)

    @property
    def stopped(self) -> bool:
        """Whether the worker told this chunk to stop."""
        return self._stop_reason is not None

    # -- what a task function asks of its attempt (worker_cli.Worker) ----------------------

    @property
    def task_id(self) -> str:
        """The task's id."""
        return self.task.task_id

    @property
    def attempt(self) -> int:
        """Which attempt at the task this is, from 1."""
        return self.task.attempt

    @property
    def trace_id(self) -> str:
        """The attempt's trace id, as the coordinator's logs and the job's events carry it."""
        return self.task.trace_id

    def restore_checkpoint(self) -> dict | None:
        """The checkpoint to resume from: this attempt's last saved, else an earlier one's."""
        with self._lock:
            if self._checkpoint is not None:
                return self._checkpoint
        return self.task.checkpoint


Handler = Callable[[ClaimedTask, TaskContext], dict]


def summarise_csv(task: ClaimedTask, context: TaskContext) -> dict:
    """Summarise one CSV chunk's column, resuming from the claim's checkpoint if it has one."""
    # Imported here, when a csv_stats chunk runs: the SDK's users import this module, and in
    # their projects `services` may be a package of their own (or absent, with chunkwise-client).
    from services.csvstats import columnar

    params = task.parameters
    resume = _resume_point(task.checkpoint)
    summary = columnar.summarise_chunk(
        context.read_input(),
        records=int(params["record_end"]) - int(params["record_start"]),
        planned_sha256=task.input_sha256,
        verified=True,  # read_input raises before its end unless the bytes hash to it
        column_index=int(params["column_index"]),
        column=params["column"],
        delimiter=params["delimiter"],
        record_start=int(params["record_start"]),
        first_line=int(params["first_line"]),
        checkpoint=resume,
        on_checkpoint=lambda checkpoint: context.save_checkpoint(checkpoint.to_dict()),
        checkpoint_every=CHECKPOINT_EVERY,
    )
    if summary.error is not None:
        # The coordinator decides the job's first error across chunks, so it needs the
        # stats of the records before the bad one as well as the bad record itself.
        raise InputRejected(
            summary.error.message(),
            details={**summary.error.to_dict(), "summary": summary.to_dict()},
        )
    return {"summary": summary.to_dict(), "metrics": {"records": summary.records}}


def _resume_point(checkpoint: dict | None):
    from services import csvstats  # as in summarise_csv

    if not checkpoint:
        return None
    try:
        return csvstats.Checkpoint.from_dict(checkpoint)
    except (ValueError, TypeError, KeyError):
        # A checkpoint only saves time: starting over beats failing the chunk for it.
        logger.warning(
            "ignoring a malformed checkpoint; starting the chunk from its first record",
            exc_info=True,
            extra={"event": "checkpoint_ignored"},
        )
        return None


BUILTIN_HANDLERS: dict[str, Handler] = {"csv_stats": summarise_csv}


def find_handler(workload: str) -> Handler:
    """Return the handler for a workload: built in, else the chunkwise.handlers entry point."""
    # Built-ins win, so an installed package cannot silently replace csv_stats.
    if workload in BUILTIN_HANDLERS:
        return BUILTIN_HANDLERS[workload]
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry_point.name == workload:
            handler = entry_point.load()
            if not callable(handler):
                raise UnknownWorkload(f"{entry_point.value} is not callable")
            return handler
    raise UnknownWorkload(f"no handler for workload {workload!r}")


def share_cores(capacity: int) -> None:
    """Give polars' thread pool the cores one slot has, unless POLARS_MAX_THREADS says.

    Each slot runs its chunk on a thread of its own, and polars' pool (one a process, a thread
    a core by default) ran beside them: with two workers of capacity 2 on two cores, eight
    threads wanted the two cores: a plain job took 0.304 s against 0.313 s, an export one 0.410
    against 0.425 s (2026-12-07, 24 jobs a side, alternated). Read at polars' import, so called
    before it.
    """
    os.environ.setdefault("POLARS_MAX_THREADS", str(max(1, usable_cores() // capacity)))


# cgroup v2: the process's group, as "0::/path", and each group's CPU quota, "max" or "QUOTA
# PERIOD" in microseconds.
SELF_CGROUP = Path("/proc/self/cgroup")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def usable_cores() -> int:
    """The cores this process may use: its CPU affinity, capped by the CPU quota of its cgroup
    and the groups above it (a container's --cpus, a pod's CPU limit), rounded down as Go's
    automaxprocs does, at least 1.

    A container sees every core of its host: with --cpus=2 on a 64-core host, polars' pool
    would otherwise get 32 threads a slot for the time of two cores.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        lines = SELF_CGROUP.read_text().splitlines()
    except OSError:
        lines = []  # not Linux
    # Only cgroup v2's line ("0::/path"): v1's quota files are not read.
    group = next((Path(line[3:]).parts[1:] for line in lines if line.startswith("0::/")), ())
    limits = [_cpu_limit(CGROUP_ROOT.joinpath(*group[:depth])) for depth in range(len(group) + 1)]
    return max(1, min([cores or 1, *(limit for limit in limits if limit is not None)]))


def _cpu_limit(group: Path) -> int | None:
    """The whole cores a cgroup's quota allows; None where it sets none or cannot be read."""
    try:
        quota, period = (group / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) // int(period)
    except (OSError, ValueError):
        return None


def load_handlers(workloads: Iterable[str]) -> dict[str, Handler]:
    """Look up every workload up front, so a missing plugin fails at start, not per task."""
    handlers = {workload: find_handler(workload) for workload in workloads}
    if summarise_csv in handlers.values():
        # polars takes a few hundred milliseconds to import: at start, not inside a lease.
        from services.csvstats import columnar

        columnar.engine()
    return handlers
