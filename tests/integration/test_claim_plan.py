"""A claim is planned once per pooled connection and capacity, and leaves the planner as it
found it.

PostgreSQL would plan the prepared claim afresh on every call (its custom plans always look
cheaper than the generic one), and planning was 40% of a claim's database time;
repositories/tasks.py tells it to keep the generic plan, for the claim alone.
"""

from __future__ import annotations

import pytest

from repositories import tasks as task_rows
from tests.integration.manifests import CREDENTIAL, WORKER, manifest
from tests.integration.test_prepared_statements import ONE_CONNECTION

CAPACITIES = (1, 3, 1, 2, 1, 3, 1)


def plans_of_the_claims(rt) -> list[tuple[int, int]]:
    """How often the pool's one connection planned each claim statement it prepared (one per
    capacity), generically and not, fewest first."""
    with rt.pool.connection() as conn:
        rows = conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE %s",
            ("%FROM leased l%",),
        ).fetchall()
    return sorted((r["generic_plans"], r["custom_plans"]) for r in rows)


def claim_one(conn) -> list[task_rows.ClaimedTask] | None:
    """Lease one echo task on this connection, as a free claim does."""
    return task_rows.claim(
        conn,
        worker_id=WORKER,
        credential_id=CREDENTIAL,
        workloads=["echo"],
        named=["echo"],
        capacity=1,
        max_per_worker=None,
        max_total=None,
        lease_seconds=60,
    )


@ONE_CONNECTION
def test_claims_are_planned_once_per_connection_and_capacity(rt, submit, claim):
    submit(manifest(sum(CAPACITIES)))
    leased = [len(claim(WORKER, capacity=c)) for c in CAPACITIES]

    assert leased == list(CAPACITIES)
    # One generic plan per capacity, used by every claim of it (1 four times, 3 twice, 2 once).
    assert plans_of_the_claims(rt) == [(1, 0), (2, 0), (4, 0)]


@ONE_CONNECTION
def test_a_claim_on_the_autocommit_connection_leaves_the_planner_setting_as_it_was(rt, submit):
    submit(manifest(1))
    with rt.pool.connection() as conn:
        assert len(claim_one(conn)) == 1
        assert conn.execute("SHOW plan_cache_mode").fetchone()["plan_cache_mode"] == "auto"


@ONE_CONNECTION
def test_a_claim_in_a_transaction_leaves_the_planner_setting_to_the_statements_after_it(rt, submit):
    submit(manifest(1))
    with rt.pool.connection() as conn, conn.transaction():
        assert len(claim_one(conn)) == 1
        assert conn.execute("SHOW plan_cache_mode").fetchone()["plan_cache_mode"] == "auto"


@ONE_CONNECTION
@pytest.mark.parametrize("in_transaction", [False, True], ids=["autocommit", "transaction"])
def test_a_refused_claim_leaves_the_planner_setting_as_it_was(rt, submit, in_transaction):
    submit(manifest(1))
    with rt.pool.connection() as conn:
        conn.execute(
            "INSERT INTO workers (id, capacity, workloads, credential_id)"
            " VALUES (%s, 1, ARRAY['echo'], %s)",
            (WORKER, CREDENTIAL + 1),
        )
        if in_transaction:
            with conn.transaction():
                assert claim_one(conn) is None
        else:
            assert claim_one(conn) is None
        assert conn.execute("SHOW plan_cache_mode").fetchone()["plan_cache_mode"] == "auto"
