"""Results of chunks that finish together go to the coordinator in one call (group commit)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Protocol

from worker_cli.client import MAX_BATCH, CoordinatorClient, RequestRejected, rejection_of

# The stored values one call carries at most, in JSON bytes: well within the coordinator's
# 4 MiB body, where each value may be 1 MiB. A larger value still goes, alone.
MAX_BATCH_VALUE_BYTES = 2 * 1024 * 1024


class Refill(Protocol):
    """The lease loop, as a batch of results asks it for the next tasks (complete and fetch)."""

    workloads: list[str]

    def reserve(self, finishing: int) -> int:
        """How many tasks a call carrying `finishing` chunks' results may lease; held for it."""

    def deliver(self, tasks: list[dict], reserved: int, trace_id: str | None) -> None:
        """Start the tasks the call leased and give back what `reserve` held."""


@dataclass
class _Pending:
    """One chunk's result, waiting for the call that carries it."""

    body: dict
    trace_id: str | None
    value_bytes: int = 0
    finished: bool = False
    outcome: dict | None = None
    error: Exception | None = None
    done: threading.Event = field(default_factory=threading.Event)


class ResultBatcher:
    """Sends every result waiting at the moment in one POST /api/v1/tasks/results.

    A chunk thread that finds no call in flight sends what is waiting (up to MAX_BATCH, the
    oldest first), its own result included; results that arrive meanwhile go in the next
    call, sent by one of their own threads. One result alone costs one call, as before; many
    finishing together cost one.
    """

    def __init__(self, client: CoordinatorClient, worker_id: str, refill: Refill | None = None):
        self._client = client
        self._worker_id = worker_id
        # With a refill, a call also leases the tasks the loop has room for; until a coordinator
        # that does not know ?claim refuses it, when every call is a plain one again.
        self.refill = refill
        self._cond = threading.Condition()
        self._pending: list[_Pending] = []
        self._sending = False

    def submit(
        self, task_id: str, *, attempt: int, lease_token: str, result: dict, trace_id: str | None
    ) -> dict:
        """Commit one result; return its outcome, or raise what the single endpoint would."""
        lease = {"task_id": task_id, "attempt": attempt, "lease_token": lease_token}
        size = len(json.dumps(result["value"]).encode()) if "value" in result else 0
        item = _Pending({**lease, **result}, trace_id, size)
        with self._cond:
            self._pending.append(item)
        while True:
            with self._cond:
                while self._sending and not item.finished:
                    self._cond.wait()
                if item.finished:
                    break
                # Oldest first, as many as the coordinator takes; this thread sends again if
                # its own result is left for the next call.
                self._sending = True
                taken = _batch_size(self._pending)
                batch, self._pending = self._pending[:taken], self._pending[taken:]
            try:
                self._send(batch)
            finally:
                with self._cond:
                    self._sending = False
                    self._cond.notify_all()
        if item.error is not None:
            raise item.error
        return item.outcome

    def _send(self, batch: list[_Pending]) -> None:
        # Every item is finished whatever happens: a chunk whose result no call carries any
        # more would otherwise wait, and send empty batches, for ever.
        # The first result's attempt names the call, so one result alone is traced as before.
        results, trace_id = [p.body for p in batch], batch[0].trace_id
        refill = self.refill
        wanted = refill.reserve(len(batch)) if refill is not None else 0
        leased: list[dict] = []
        try:
            if wanted:
                outcomes, leased = self._complete_and_claim(results, wanted, trace_id)
            else:
                outcomes = self._client.submit_results(
                    worker_id=self._worker_id, results=results, trace_id=trace_id
                )
            settled = list(zip(batch, map(_answer, outcomes), strict=True))
        except Exception as exc:  # the whole call failed: each chunk decides what to do
            settled = [(item, (None, exc)) for item in batch]
        finally:
            if wanted:
                refill.deliver(leased, wanted, trace_id)
        with self._cond:
            for item, (outcome, error) in settled:
                item.outcome, item.error, item.finished = outcome, error, True

    def _complete_and_claim(
        self, results: list[dict], wanted: int, trace_id: str | None
    ) -> tuple[list[dict], list[dict]]:
        try:
            return self._client.complete_and_claim(
                worker_id=self._worker_id,
                results=results,
                workloads=list(self.refill.workloads),
                capacity=wanted,
                trace_id=trace_id,
            )
        except RequestRejected as exc:
            named = (exc.details or {}).get("fields") or {}
            if exc.status != 422 or not {"claim", "workloads"} & set(named):
                raise
        # A coordinator from before complete and fetch refused the whole call, recording
        # nothing: send the results alone, now and from now on.
        self.refill = None
        outcomes = self._client.submit_results(
            worker_id=self._worker_id, results=results, trace_id=trace_id
        )
        return outcomes, []


def _batch_size(pending: list[_Pending]) -> int:
    """How many of the oldest pending results one call carries: up to MAX_BATCH, and values of
    up to MAX_BATCH_VALUE_BYTES between them, but always the first."""
    total = 0
    for taken, item in enumerate(pending[:MAX_BATCH]):
        total += item.value_bytes
        if taken and total > MAX_BATCH_VALUE_BYTES:
            return taken
    return min(len(pending), MAX_BATCH)


def _answer(outcome: dict) -> tuple[dict | None, Exception | None]:
    # What the single endpoint would have answered: the outcome, or the error it would raise.
    if outcome["outcome"] == "rejected":
        return None, rejection_of(outcome)
    return outcome, None
