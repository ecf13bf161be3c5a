"""The seam between the generic queue and a workload's own rules, and each workload's caps."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from uuid import UUID

from psycopg import Connection
from psycopg_pool import ConnectionPool

from repositories.jobs import Job
from repositories.tasks import Task
from services.errors import InvalidInput, NotFound
from services.task_values import JsonValue

# What a workload may be named (a slug): what workers, URLs and metric labels carry unquoted.
NAME = re.compile(r"[a-z][a-z0-9_-]{0,62}")
NAME_RULE = "a slug: a-z, then up to 62 of a-z 0-9 _ -"

# A byte bound no user reaches: bigint's largest.
UNLIMITED_BYTES = 2**63 - 1


@dataclass(frozen=True)
class Caps:
    """How much of the queue one workload may take; None means no cap of that kind."""

    max_leases_per_worker: int | None
    max_leases_total: int | None
    max_queued_tasks: int
    max_tasks_per_job: int
    # Tasks its claims may start a second, from a bucket of one second's starts (at least one).
    max_starts_per_second: float | None = None
    # One user's share: its unfinished tasks, and the bytes of parameters, args and labels its
    # unfinished jobs store (sql/0028).
    max_queued_tasks_per_user: int | None = None
    max_stored_bytes_per_user: int | None = None

    @property
    def user_queued_limit(self) -> int:
        """How many unfinished tasks one user may have queued (the whole cap if unset)."""
        return self.max_queued_tasks_per_user or self.max_queued_tasks

    @property
    def user_bytes_limit(self) -> int:
        """How many bytes of parameters, args and labels one user's unfinished jobs may store."""
        return self.max_stored_bytes_per_user or UNLIMITED_BYTES

    @property
    def serialised(self) -> bool:
        """Whether claims must take turns so the lease caps and the rate cannot be raced."""
        return (
            self.max_leases_per_worker is not None
            or self.max_leases_total is not None
            or self.max_starts_per_second is not None
        )

    @property
    def start_burst(self) -> float | None:
        """The most starts a rate-limited workload's claims may make at once, after a lull."""
        rate = self.max_starts_per_second
        return None if rate is None else max(1.0, rate)


@dataclass(frozen=True)
class TaskResult:
    """What a worker reports for a completed task."""

    result_uri: str | None = None
    result_sha256: str | None = None
    metrics: dict | None = None
    summary: dict | None = None
    # A value for the coordinator to store (sql/0030), instead of a manifest.
    value: JsonValue | None = None


@dataclass(frozen=True)
class TaskFailure:
    """What a worker reports for a failed task."""

    error_code: str
    error_message: str
    retryable: bool
    details: dict
    # The worker's own word on when another attempt may help (an upstream's Retry-After);
    # None: the coordinator's backoff decides.
    retry_after_seconds: float | None = None


@dataclass(frozen=True)
class TaskInput:
    """Where the bytes of a task's input are: a byte range of an archived upload."""

    sha256: str
    offset: int
    length: int


class Workload:
    """The rules of a workload whose workers keep their own inputs and results (manifest jobs).

    A workload with a merge step (csv_stats) subclasses it; the generic task and job services
    call only these methods, never a workload's name.
    """

    merged = False  # whether a job ends in a merge step rather than with its last task

    def __init__(self, name: str, caps: Caps):
        self.name = name
        self.caps = caps

    def check_manifest(self) -> None:
        """Refuse a manifest job if this workload's jobs are submitted another way."""

    def check_result(self, task: Task, result: TaskResult) -> tuple[str, str]:
        """Validate a result before it is accepted; return its result uri and digest."""
        missing = [name for name in ("result_uri", "result_sha256") if not getattr(result, name)]
        if missing:
            raise InvalidInput(
                "result_uri and result_sha256 are required",
                details={"fields": {name: ["required"] for name in missing}},
            )
        return result.result_uri, result.result_sha256

    def accept_result(self, conn: Connection, task: Task, result: TaskResult) -> None:
        """Store what the workload keeps of a just-completed task (manifests keep nothing)."""

    def check_failure(self, task: Task, failure: TaskFailure) -> None:
        """Validate a reported failure before it is recorded."""

    def task_input(self, job: Job, task: Task) -> TaskInput:
        """Where the coordinator keeps the task's input bytes."""
        raise NotFound(f"task {task.id} has no input stored by the coordinator")

    def accepted_summaries(self, conn: Connection, job_id: UUID) -> dict[UUID, dict]:
        """What the coordinator kept of each completed task, by task id (manifests: nothing)."""
        return {}

    def partial_result(self, conn: Connection, job: Job) -> dict | None:
        """What a failed job can still report of its finished tasks."""
        return None

    def merge(self, pool: ConnectionPool, job_id: UUID) -> Job | None:
        """Finish a job in `merging` exactly once (only merged workloads have that state)."""
        return None


class Workloads:
    """The workloads this coordinator serves, by name, each under its kind's rules (manifest
    jobs' unless `kinds` names its own), with the caps the workloads table last said."""

    def __init__(
        self,
        caps: Mapping[str, Caps],
        kinds: Mapping[str, Callable[[Caps], Workload]] | None = None,
    ):
        self._kinds = dict(kinds or {})
        self._rules: dict[str, Workload] = {}
        self._reading = threading.Lock()
        self.load(caps)

    def load_latest(self, read: Callable[[], Mapping[str, Caps]]) -> None:
        """Serve what `read` returns, one caller reading and serving at a time: a request's
        reload and the listener's cannot cross, so what was read earlier never replaces what
        was read later."""
        with self._reading:
            self.load(read())

    def load(self, caps: Mapping[str, Caps]) -> None:
        """Serve exactly these workloads, with these caps, from now on."""
        rules = {}
        for name, workload_caps in caps.items():
            kind = self._kinds.get(name)
            rules[name] = kind(workload_caps) if kind else Workload(name, workload_caps)
        # One assignment: a request sees the old set or the new one, never half of each.
        self._rules = rules

    def names(self) -> list[str]:
        """The served workloads' names, sorted."""
        return sorted(self._rules)

    def get(self, name: str) -> Workload | None:
        """The rules of a served workload, or None."""
        return self._rules.get(name)

    def of(self, name: str) -> Workload:
        """The rules of a workload whose tasks are already in the queue."""
        return self._rules.get(name) or Workload(name, Caps(None, None, 0, 0))

    def require(self, names: Iterable[str], field: str) -> list[Workload]:
        """The rules of each named workload; InvalidInput naming the field if one is unknown."""
        names = list(names)
        rules = self._rules
        unknown = sorted({n for n in names if n not in rules})
        if unknown:
            raise InvalidInput.field(field, f"unknown workloads: {', '.join(unknown)}")
        return [rules[n] for n in dict.fromkeys(names)]
