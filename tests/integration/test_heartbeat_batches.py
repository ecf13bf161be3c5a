"""POST /api/v1/tasks/heartbeats: many leases renewed in one transaction, each fenced on its own."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
from psycopg.rows import dict_row

from repositories import tasks as task_rows
from tests.integration.manifests import OTHER_WORKER, WORKER, manifest


def beats(client, headers, items: list[dict], worker_id: str = WORKER):
    """POST a batch of heartbeats as the worker."""
    return client.post(
        "/api/v1/tasks/heartbeats",
        json={"worker_id": worker_id, "heartbeats": items},
        headers=headers["worker"],
    )


def beat(claimed: dict, **extra: object) -> dict:
    """A heartbeat item for a claimed task under its own attempt."""
    return {
        "task_id": claimed["task_id"],
        "attempt": claimed["attempt"],
        "lease_token": claimed["lease_token"],
        **extra,
    }


def test_a_batch_renews_every_lease_in_order_and_keeps_each_checkpoint(
    submit, claim, client, headers, task_row
):
    submit(manifest(3))
    leased = claim(WORKER, capacity=3)
    before = {t["task_id"]: task_row(t["task_id"])["lease_expires_at"] for t in leased}
    items = [beat(t, checkpoint={"at": n}) for n, t in enumerate(leased)]

    response = beats(client, headers, items)

    assert response.status_code == 200, response.get_json()
    outcomes = response.get_json()["results"]
    assert [o["task_id"] for o in outcomes] == [t["task_id"] for t in leased]
    assert {(o["outcome"], o["status"], o["error"]) for o in outcomes} == {("renewed", 200, None)}
    for n, t in enumerate(leased):
        row = task_row(t["task_id"])
        assert row["lease_expires_at"] > before[t["task_id"]]
        assert outcomes[n]["lease_expires_at"] == row["lease_expires_at"].isoformat()
        assert row["checkpoint"] == {"at": n}


def test_a_heartbeat_without_a_checkpoint_keeps_the_last_one(
    submit, claim, client, headers, task_row
):
    submit(manifest(1))
    [leased] = claim(WORKER)
    beats(client, headers, [beat(leased, checkpoint={"records": 5})])

    assert beats(client, headers, [beat(leased)]).status_code == 200

    assert task_row(leased["task_id"])["checkpoint"] == {"records": 5}


def test_one_refused_heartbeat_refuses_only_itself_with_the_single_endpoints_answer(
    submit, claim, client, headers, task_row, task_call
):
    job = submit(manifest(4))
    good, stale, cancelled_later, foreign = claim(WORKER, capacity=4)
    unknown = str(uuid.uuid4())
    items = [
        beat(good, checkpoint={"kept": True}),
        {**beat(stale), "attempt": stale["attempt"] + 1},
        {"task_id": unknown, "attempt": 1, "lease_token": good["lease_token"]},
    ]

    outcomes = beats(client, headers, items).get_json()["results"]

    assert [(o["outcome"], o["status"]) for o in outcomes] == [
        ("renewed", 200),
        ("rejected", 409),
        ("rejected", 404),
    ]
    lease = {"worker_id": WORKER, "attempt": 2, "lease_token": stale["lease_token"]}
    single = task_call(stale["task_id"], "heartbeat", lease)
    assert outcomes[1]["error"] == single.get_json()["error"]
    # Attempt 2 was never this caller's lease: it hears no more than that.
    assert outcomes[1]["error"]["code"] == "lease_lost"
    assert outcomes[1]["lease_expires_at"] is None
    assert task_row(good["task_id"])["checkpoint"] == {"kept": True}
    assert task_row(stale["task_id"])["checkpoint"] is None

    client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=headers["user"])
    outcomes = beats(client, headers, [beat(cancelled_later)]).get_json()["results"]
    assert (outcomes[0]["status"], outcomes[0]["error"]["code"]) == (409, "task_cancelled")
    assert foreign  # claimed only so the job has a fourth leased task when it is cancelled


def test_another_workers_heartbeats_are_refused_with_lease_lost_and_renew_nothing(
    submit, claim, client, headers, task_row
):
    submit(manifest(2))
    leased = claim(WORKER, capacity=2)
    before = [task_row(t["task_id"])["lease_expires_at"] for t in leased]

    outcomes = beats(client, headers, [beat(t) for t in leased], worker_id=OTHER_WORKER)

    assert {(o["status"], o["error"]["code"]) for o in outcomes.get_json()["results"]} == {
        (409, "lease_lost")
    }
    assert [task_row(t["task_id"])["lease_expires_at"] for t in leased] == before


def test_a_malformed_batch_is_422_naming_the_field_and_renews_nothing(
    submit, claim, client, headers, task_row
):
    submit(manifest(1))
    [leased] = claim(WORKER)
    before = task_row(leased["task_id"])["lease_expires_at"]

    for items in (
        [],
        [{**beat(leased), "attempt": "one"}],
        [{"attempt": 1}],
        [1, None],
        [beat(leased), {**beat(leased), "checkpoint": {"other": 1}}],
        [beat(leased)] * 1001,
    ):
        response = beats(client, headers, items)
        assert response.status_code == 422, items[:2]
        assert "heartbeats" in response.get_json()["error"]["details"]["fields"]
    assert task_row(leased["task_id"])["lease_expires_at"] == before


def test_user_tokens_cannot_post_heartbeat_batches(client, headers):
    response = client.post(
        "/api/v1/tasks/heartbeats",
        json={"worker_id": WORKER, "heartbeats": []},
        headers=headers["user"],
    )
    assert response.status_code == 403


def test_a_heartbeat_batch_and_a_result_batch_over_the_same_tasks_take_turns_not_deadlock(
    submit, claim, database_url, db
):
    # Both lock their rows in id order. Held up behind a third transaction on the first task,
    # heartbeats listing the tasks the other way round would otherwise take the second one
    # while queued behind the results for the first, and once it is free each would wait for
    # the other.
    submit(manifest(2))
    first, second = sorted(claim(WORKER, capacity=2), key=lambda t: uuid.UUID(t["task_id"]))
    ids = [uuid.UUID(first["task_id"]), uuid.UUID(second["task_id"])]
    tokens = {i: t["lease_token"] for i, t in zip(ids, (first, second), strict=True)}
    renewals = [task_rows.Renewal(i, 1, tokens[i]) for i in reversed(ids)]
    credential = db.execute("SELECT credential_id FROM workers WHERE id = %s", (WORKER,)).fetchone()
    # Through the worker's own index both statements would meet the rows in one order by
    # chance; without it they meet them in the order each lists them.
    db.execute("DROP INDEX tasks_lease_owner_idx")
    outcomes = [task_rows.Outcome(i, 1, tokens[i], "s3://out", "0" * 64, {}) for i in ids]
    errors: list[Exception] = []

    def in_transaction(work) -> None:
        try:
            with psycopg.connect(database_url, row_factory=dict_row) as conn:
                conn.execute("SET deadlock_timeout = '100ms'")
                # Each row found through the primary key, in the order the batch lists them:
                # a plan the planner may choose on any table (see the index dropped below).
                conn.execute("SET enable_seqscan = off")
                conn.execute("SET enable_hashjoin = off")
                conn.execute("SET enable_mergejoin = off")
                work(conn)
        except psycopg.Error as exc:
            errors.append(exc)

    with psycopg.connect(database_url) as holder:
        holder.execute("SELECT 1 FROM tasks WHERE id = %s FOR UPDATE", (ids[0],))
        threads = [
            threading.Thread(
                target=in_transaction,
                args=(
                    lambda c: task_rows.complete_many(
                        c, WORKER, credential["credential_id"], outcomes
                    ),
                ),
            ),
            threading.Thread(
                target=in_transaction,
                args=(
                    lambda c: task_rows.renew_many(
                        c, WORKER, credential["credential_id"], renewals, 30
                    ),
                ),
            ),
        ]
        for thread in threads:
            thread.start()
            time.sleep(0.3)  # waiting for the first task, in this order
    for thread in threads:
        thread.join(10)

    assert errors == []
