"""The worker protocol's calls wait for PostgreSQL as few times as their guarantees allow.

A round trip is each time the coordinator sends a Sync (the extended protocol's end of a
statement) or a simple Query (BEGIN, COMMIT) and waits for the answer; libpq's trace of the
one pooled connection counts them. Per-request cost dominates at small claims (issue 42), so
these numbers are the ones docs/performance/profile.md states.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable

from psycopg.pq import Trace

from tests.integration.manifests import WORKER, batch_item, manifest
from tests.integration.test_prepared_statements import ONE_CONNECTION

# A batch of this many results of one job that it does not finish (a finishing job settles).
BATCH = 8


def round_trips(rt, call: Callable[[], object]) -> int:
    """How many round trips `call` makes on the pool's one connection."""
    with tempfile.NamedTemporaryFile("w+") as trace:
        with rt.pool.connection() as conn:
            conn.pgconn.trace(trace.fileno())
            conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS)
        call()
        with rt.pool.connection() as conn:
            conn.pgconn.untrace()
        trace.seek(0)
        sent = [line.split("\t") for line in trace.read().splitlines()]
    return sum(1 for m in sent if m[0] == "F" and m[2].split()[0] in ("Sync", "Query"))


def results(client, headers, leased: list[dict], claim: int | None = None):
    """POST a batch of results for these claimed tasks (with ?claim=, claiming the next)."""
    body: dict = {"worker_id": WORKER, "results": [batch_item(t) for t in leased]}
    query = ""
    if claim:
        body["workloads"], query = ["echo"], f"?claim={claim}"
    answer = client.post(f"/api/v1/tasks/results{query}", json=body, headers=headers["worker"])
    assert answer.status_code == 200, answer.get_json()
    assert {o["outcome"] for o in answer.get_json()["results"]} == {"accepted"}
    return answer.get_json()


@ONE_CONNECTION
def test_a_claim_is_one_round_trip(rt, submit, claim):
    submit(manifest(BATCH))
    claim(WORKER)  # the credential is read once per process

    assert round_trips(rt, lambda: claim(WORKER, capacity=BATCH)) == 1


@ONE_CONNECTION
def test_a_batch_of_results_is_six_round_trips_and_fetching_the_next_adds_one(
    rt, submit, claim, client, headers
):
    submit(manifest(5 * BATCH))
    first, second, third = (claim(WORKER, capacity=BATCH) for _ in range(3))
    # The statements prepared on their first use here, as on each pooled connection once.
    results(client, headers, first)

    # BEGIN, the tasks, the fenced completion (its attempts and events too), the job's
    # counter, the worker's row, COMMIT.
    assert round_trips(rt, lambda: results(client, headers, second)) == 6
    fetched: list[dict] = []
    trips = round_trips(rt, lambda: fetched.extend(results(client, headers, third, BATCH)["tasks"]))
    assert trips == 7 and len(fetched) == BATCH
