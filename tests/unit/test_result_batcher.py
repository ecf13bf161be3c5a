"""Results of chunks that finish together share one call; each still gets its own answer."""

from __future__ import annotations

import threading

import pytest

from worker_cli.client import CoordinatorUnavailable, LeaseLost, RequestRejected
from worker_cli.results import ResultBatcher

WAIT = 5.0


class GatedClient:
    """Records each batch; the first call waits at a gate so others can pile up behind it."""

    def __init__(self, answer=None):
        self.calls: list[dict] = []
        self.gate = threading.Event()
        self.first_call = threading.Event()
        self.answer = answer or (
            lambda item: {"task_id": item["task_id"], "outcome": "accepted", "status": 200}
        )

    def submit_results(self, *, worker_id, results, trace_id=None):
        self.calls.append({"worker_id": worker_id, "results": results, "trace_id": trace_id})
        if len(self.calls) == 1:
            self.first_call.set()
            assert self.gate.wait(WAIT)
        answers = [self.answer(item) for item in results]
        if any(isinstance(a, Exception) for a in answers):
            raise next(a for a in answers if isinstance(a, Exception))
        return answers


def submit_in_thread(batcher, task_id, outcomes, result=None):
    def run():
        try:
            outcomes[task_id] = batcher.submit(
                task_id,
                attempt=1,
                lease_token="L",
                result=result or {"summary": {}},
                trace_id=f"trace-{task_id}",
            )
        except Exception as exc:
            outcomes[task_id] = exc

    # A daemon: a chunk thread left waiting for ever must fail its test, not hang the run.
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_one_result_alone_is_one_call_traced_as_its_attempt():
    client = GatedClient()
    client.gate.set()
    outcome = ResultBatcher(client, "w1").submit(
        "t1", attempt=3, lease_token="L", result={"m": 1}, trace_id="abc"
    )
    assert outcome == {"task_id": "t1", "outcome": "accepted", "status": 200}
    assert client.calls == [
        {
            "worker_id": "w1",
            "results": [{"task_id": "t1", "attempt": 3, "lease_token": "L", "m": 1}],
            "trace_id": "abc",
        }
    ]


def test_results_that_finish_while_a_call_is_in_flight_share_the_next_call():
    client = GatedClient()
    batcher = ResultBatcher(client, "w1")
    outcomes: dict = {}
    first = submit_in_thread(batcher, "t1", outcomes)
    assert client.first_call.wait(WAIT)
    others = [submit_in_thread(batcher, f"t{n}", outcomes) for n in range(2, 6)]
    while len(batcher._pending) < 4:  # the four wait behind the call
        threading.Event().wait(0.001)
    client.gate.set()
    for thread in [first, *others]:
        thread.join(WAIT)
    assert [len(call["results"]) for call in client.calls] == [1, 4]
    assert {task_id: outcome["task_id"] for task_id, outcome in outcomes.items()} == {
        f"t{n}": f"t{n}" for n in range(1, 6)
    }


def test_more_results_than_one_call_may_carry_go_oldest_first_in_several_calls(monkeypatch):
    monkeypatch.setattr("worker_cli.results.MAX_BATCH", 2)
    client = GatedClient()
    batcher = ResultBatcher(client, "w1")
    outcomes: dict = {}
    first = submit_in_thread(batcher, "t1", outcomes)
    assert client.first_call.wait(WAIT)
    others = []
    for n in range(2, 7):
        others.append(submit_in_thread(batcher, f"t{n}", outcomes))
        while len(batcher._pending) < n - 1:  # queued behind the call, in this order
            threading.Event().wait(0.001)
    client.gate.set()
    for thread in [first, *others]:
        thread.join(WAIT)

    assert [[r["task_id"] for r in call["results"]] for call in client.calls] == [
        ["t1"],
        ["t2", "t3"],
        ["t4", "t5"],
        ["t6"],
    ]
    assert {task_id: outcome["task_id"] for task_id, outcome in outcomes.items()} == {
        f"t{n}": f"t{n}" for n in range(1, 7)
    }


def test_stored_values_go_in_calls_of_at_most_max_batch_value_bytes_a_larger_one_alone(
    monkeypatch,
):
    monkeypatch.setattr("worker_cli.results.MAX_BATCH_VALUE_BYTES", 100)
    client = GatedClient()
    batcher = ResultBatcher(client, "w1")
    outcomes: dict = {}
    first = submit_in_thread(batcher, "t1", outcomes)
    assert client.first_call.wait(WAIT)
    sizes = {"t2": 40, "t3": 40, "t4": 40, "t5": 150, "t6": 10}  # JSON: 2 bytes more each
    others = []
    for n, (task_id, size) in enumerate(sizes.items(), start=1):
        value = {"value": "x" * size}
        others.append(submit_in_thread(batcher, task_id, outcomes, value))
        while len(batcher._pending) < n:
            threading.Event().wait(0.001)
    client.gate.set()
    for thread in [first, *others]:
        thread.join(WAIT)

    assert [[r["task_id"] for r in call["results"]] for call in client.calls] == [
        ["t1"],
        ["t2", "t3"],
        ["t4"],
        ["t5"],
        ["t6"],
    ]


def test_a_refused_result_raises_for_its_chunk_only():
    def answer(item):
        if item["task_id"] == "stale":
            error = {"code": "stale_attempt", "message": "old", "details": {}}
            return {"outcome": "rejected", "status": 409, "error": error}
        if item["task_id"] == "bad":
            error = {"code": "invalid_input", "message": "no", "details": {}}
            return {"outcome": "rejected", "status": 422, "error": error}
        return {"task_id": item["task_id"], "outcome": "accepted", "status": 200}

    client = GatedClient(answer)
    batcher = ResultBatcher(client, "w1")
    outcomes: dict = {}
    first = submit_in_thread(batcher, "first", outcomes)
    assert client.first_call.wait(WAIT)
    rest = [submit_in_thread(batcher, name, outcomes) for name in ("ok", "stale", "bad")]
    while len(batcher._pending) < 3:
        threading.Event().wait(0.001)
    client.gate.set()
    for thread in [first, *rest]:
        thread.join(WAIT)
    assert outcomes["ok"]["task_id"] == "ok"
    assert isinstance(outcomes["stale"], LeaseLost) and outcomes["stale"].code == "stale_attempt"
    assert isinstance(outcomes["bad"], RequestRejected) and outcomes["bad"].status == 422


def test_a_call_that_fails_raises_for_every_result_it_carried():
    client = GatedClient(lambda item: CoordinatorUnavailable("down", status=503))
    client.gate.set()
    with pytest.raises(CoordinatorUnavailable):
        ResultBatcher(client, "w1").submit(
            "t1", attempt=1, lease_token="L", result={}, trace_id=None
        )


@pytest.mark.parametrize(
    "answers",
    [lambda results: results[:-1], lambda results: [None] * len(results)],
    ids=["an outcome short", "outcomes that are no objects"],
)
def test_an_answer_that_does_not_fit_the_batch_raises_for_every_result_it_carried(answers):
    class Garbled(GatedClient):
        def submit_results(self, *, worker_id, results, trace_id=None):
            return answers(super().submit_results(worker_id=worker_id, results=results))

    client = Garbled()
    batcher = ResultBatcher(client, "w1")
    outcomes: dict = {}
    first = submit_in_thread(batcher, "t1", outcomes)
    assert client.first_call.wait(WAIT)
    rest = [submit_in_thread(batcher, name, outcomes) for name in ("t2", "t3")]
    while len(batcher._pending) < 2:
        threading.Event().wait(0.001)
    client.gate.set()
    for thread in [first, *rest]:
        thread.join(WAIT)

    assert not any(thread.is_alive() for thread in [first, *rest]), "a chunk waits for ever"
    assert all(isinstance(outcomes[name], Exception) for name in ("t1", "t2", "t3"))
    assert [len(call["results"]) for call in client.calls] == [1, 2]


class Refill:
    """A lease loop that has room for `room` tasks beside the chunks whose results go."""

    def __init__(self, room: int = 0):
        self.workloads = ["fake"]
        self.room = room
        self.reserved: list[int] = []
        self.delivered: list[tuple[list[dict], int]] = []

    def reserve(self, finishing: int) -> int:
        self.reserved.append(finishing)
        return finishing + self.room

    def deliver(self, tasks: list[dict], reserved: int, trace_id: str | None) -> None:
        self.delivered.append((tasks, reserved))


class FetchingClient(GatedClient):
    """Answers complete and fetch with `leased` (or raises it), and records each such call."""

    def __init__(self, leased):
        super().__init__()
        self.gate.set()
        self.leased = leased
        self.fetches: list[dict] = []

    def complete_and_claim(self, *, worker_id, results, workloads, capacity, trace_id=None):
        self.fetches.append({"workloads": workloads, "capacity": capacity})
        if isinstance(self.leased, Exception):
            raise self.leased
        return self.submit_results(worker_id=worker_id, results=results), self.leased


def submit_one(batcher: ResultBatcher, task_id: str = "t1"):
    return batcher.submit(task_id, attempt=1, lease_token="L", result={}, trace_id="tr")


def test_a_batch_asks_for_the_slots_it_frees_and_hands_the_leased_tasks_to_the_loop():
    client, refill = FetchingClient([{"task_id": "t9"}]), Refill(room=2)

    outcome = submit_one(ResultBatcher(client, "w1", refill))

    assert outcome["outcome"] == "accepted"
    assert refill.reserved == [1]
    assert client.fetches == [{"workloads": ["fake"], "capacity": 3}]
    assert refill.delivered == [([{"task_id": "t9"}], 3)]
    assert client.calls[0]["results"][0]["task_id"] == "t1"


def test_with_no_room_the_results_go_alone():
    client = FetchingClient([])

    class Full(Refill):
        def reserve(self, finishing: int) -> int:
            return 0

    refill = Full()
    submit_one(ResultBatcher(client, "w1", refill))

    assert client.fetches == []
    assert len(client.calls) == 1
    assert refill.delivered == []


def test_a_failed_call_gives_back_the_slots_it_held_and_fails_its_results():
    client, refill = FetchingClient(CoordinatorUnavailable("down", status=503)), Refill()

    with pytest.raises(CoordinatorUnavailable):
        submit_one(ResultBatcher(client, "w1", refill))

    assert refill.delivered == [([], 1)]


def test_a_coordinator_that_does_not_know_claim_gets_the_results_alone_from_then_on():
    unknown = {"fields": {"workloads": ["Unknown field."]}}
    refused = RequestRejected("invalid fields: workloads", status=422, details=unknown)
    client, refill = FetchingClient(refused), Refill()
    batcher = ResultBatcher(client, "w1", refill)

    first = submit_one(batcher, "t1")
    second = submit_one(batcher, "t2")

    assert (first["outcome"], second["outcome"]) == ("accepted", "accepted")
    assert len(client.fetches) == 1  # refused once, never asked again
    assert [c["results"][0]["task_id"] for c in client.calls] == ["t1", "t2"]
    assert refill.delivered == [([], 1)]


def test_another_refusal_of_the_whole_call_is_each_results_error():
    refused = RequestRejected("forbidden", status=403, code="forbidden")
    client, refill = FetchingClient(refused), Refill()

    with pytest.raises(RequestRejected):
        submit_one(ResultBatcher(client, "w1", refill))

    assert client.calls == []
    assert refill.delivered == [([], 1)]
