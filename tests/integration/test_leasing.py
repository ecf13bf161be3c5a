"""Leasing against the real database: concurrent claims, caps, expiry, order, long-polling."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from repositories import locks
from services import jobs, settlement, tasks
from services.jobs import JobSpec, TaskSpec
from services.wakeups import Wakeups
from tests.integration.manifests import CREDENTIAL, OTHER_WORKER, WORKER, manifest, sha256_of

TASKS = 500
JOBS = 10
WORKERS = 8
PER_WORKER_CAP = 2  # csv_stats's default caps, given to the echo workload here
TOTAL_CAP = 8
DEADLINE_SECONDS = 20


@pytest.fixture
def app_config(app_config):
    """The echo workload held to lease caps, so claims of it must take turns to keep them."""
    return {
        **app_config,
        "CHUNKWISE_MANIFEST_MAX_LEASES_PER_WORKER": str(PER_WORKER_CAP),
        "CHUNKWISE_MANIFEST_MAX_LEASES_TOTAL": str(TOTAL_CAP),
    }


def later(minutes: int = 5) -> datetime:
    """A moment after every lease granted now has run out."""
    return datetime.now(UTC) + timedelta(minutes=minutes)


def echo_spec(chunks: int, **job: object) -> JobSpec:
    """A manifest job of `chunks` echo tasks, for calling services directly."""
    return JobSpec(
        workload="echo",
        input_uri="s3://in/",
        parameters={},
        tasks=[
            TaskSpec(input_uri=f"s3://in/{n}", input_sha256=sha256_of(str(n)), parameters={})
            for n in range(chunks)
        ],
        **job,
    )


# --- concurrency and caps ---------------------------------------------------------------------


def test_concurrent_workers_lease_each_task_once_lose_none_and_respect_the_caps(rt, user, db):
    caps = rt.workloads.of("echo").caps
    assert (caps.max_leases_per_worker, caps.max_leases_total) == (PER_WORKER_CAP, TOTAL_CAP)
    # Several jobs: completing a chunk re-reads its whole job, which is not what this measures.
    created = [
        jobs.create_job(rt, user, echo_spec(TASKS // JOBS), trace_id=uuid.uuid4().hex)
        for _ in range(JOBS)
    ]
    leases: dict[str, list[tuple[uuid.UUID, int]]] = {f"w{n}": [] for n in range(WORKERS)}
    problems: list[str] = []
    largest_claim = Counter()
    completed = Counter()
    lock = threading.Lock()
    stop = threading.Event()
    deadline = time.monotonic() + DEADLINE_SECONDS

    def work(worker_id: str) -> None:
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                # Asking for more than the per-worker cap makes the cap, not capacity, the limit.
                claimed = tasks.claim_tasks(
                    rt, worker_id, ["echo"], capacity=PER_WORKER_CAP + 1, credential_id=CREDENTIAL
                )
                largest_claim[worker_id] = max(largest_claim[worker_id], len(claimed))
                if not claimed:
                    time.sleep(0.005)
                    continue
                for c in claimed:
                    leases[worker_id].append((c.task.id, c.task.attempt))
                    uri = f"s3://out/{c.task.id}"
                    tasks.complete_task(
                        rt,
                        c.task.id,
                        worker_id,
                        CREDENTIAL,
                        c.task.attempt,
                        c.lease_token,
                        tasks.TaskResult(uri, sha256_of(uri), {}),
                    )
                    with lock:
                        completed["all"] += 1
                        if completed["all"] >= TASKS:
                            stop.set()
        except Exception as exc:  # any failure in a worker thread is a finding
            problems.append(f"{worker_id}: {exc!r}")
            stop.set()

    samples: list[dict] = []

    def sample() -> None:
        with rt.pool.connection() as conn:
            while not stop.is_set() and time.monotonic() < deadline:
                # One statement, one snapshot: both numbers describe the same instant.
                samples.append(
                    conn.execute(
                        """
                    SELECT COALESCE(sum(n), 0)::int AS leased, COALESCE(max(n), 0) AS busiest
                    FROM (SELECT count(*) AS n FROM tasks WHERE status = 'leased'
                          GROUP BY lease_owner) held
                    """
                    ).fetchone()
                )
                conn.commit()
                time.sleep(0.002)

    threads = [threading.Thread(target=work, args=(w,)) for w in leases]
    threads.append(threading.Thread(target=sample))
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_SECONDS + 5)

    assert problems == []
    assert completed["all"] == TASKS, "the workers ran out of time: some task was lost"
    # Caps, as each claim saw them and as the table showed them while the claims ran.
    assert max(largest_claim.values()) <= PER_WORKER_CAP
    assert samples, "the sampler never ran"
    assert max(s["leased"] for s in samples) <= TOTAL_CAP
    # ...and the claims really overlapped: several workers held leases at once.
    assert max(s["leased"] for s in samples) > PER_WORKER_CAP
    assert max(s["busiest"] for s in samples) <= PER_WORKER_CAP
    # Every (task, attempt) went to exactly one worker, and every task exactly once.
    handed_out = Counter(lease for held in leases.values() for lease in held)
    assert set(handed_out.values()) == {1}
    assert len(handed_out) == TASKS
    assert {task_id for task_id, _ in handed_out} == {
        r["id"] for r in db.execute("SELECT id FROM tasks").fetchall()
    }
    # The attempt history agrees: one row per (task, attempt), opened for the worker told.
    claimed_by = {lease: worker for worker, held in leases.items() for lease in held}
    history = db.execute(
        "SELECT task_id, attempt, worker_id, outcome FROM task_attempts"
    ).fetchall()
    assert len(history) == TASKS
    assert (
        db.execute(
            "SELECT task_id, attempt FROM task_attempts GROUP BY task_id, attempt"
            " HAVING count(*) > 1"
        ).fetchall()
        == []
    )
    for row in history:
        assert claimed_by[(row["task_id"], row["attempt"])] == row["worker_id"]
        assert row["outcome"] == "completed"
    statuses = db.execute("SELECT status, count(*) AS n FROM tasks GROUP BY status").fetchall()
    assert statuses == [{"status": "completed", "n": TASKS}]
    assert db.execute("SELECT sum(tasks_done) AS n FROM workers").fetchone()["n"] == TASKS
    assert db.execute("SELECT status, count(*) AS n FROM jobs GROUP BY status").fetchall() == [
        {"status": "succeeded", "n": len(created)}
    ]


def test_a_worker_at_its_cap_gets_nothing_until_it_finishes_a_task(submit, claim, complete):
    submit(manifest(5))

    first = claim(WORKER, capacity=5)
    assert len(first) == PER_WORKER_CAP
    assert claim(WORKER, capacity=5) == []
    assert len(claim(OTHER_WORKER, capacity=5)) == PER_WORKER_CAP

    complete(first[0])

    assert len(claim(WORKER, capacity=5)) == 1


def test_claims_stop_at_the_total_cap_across_workers(submit, claim, db):
    submit(manifest(TOTAL_CAP + 4))

    leased = [t for n in range(TOTAL_CAP) for t in claim(f"w{n}", capacity=PER_WORKER_CAP)]

    assert len(leased) == TOTAL_CAP
    assert claim("one-more", capacity=PER_WORKER_CAP) == []
    assert (
        db.execute("SELECT count(*) AS n FROM tasks WHERE status = 'leased'").fetchone()["n"]
        == TOTAL_CAP
    )


def test_a_capped_claim_holds_its_workloads_turn_until_it_commits(rt, user, database_url, db):
    jobs.create_job(rt, user, echo_spec(2), trace_id=uuid.uuid4().hex)

    def claim() -> list:
        return tasks.claim_tasks(rt, WORKER, ["echo"], capacity=1, credential_id=CREDENTIAL)

    assert len(claim()) == 1  # and the worker's row, which the next claim will update
    held = {"classid": locks.CLAIM, "key": "echo"}
    with psycopg.connect(database_url) as holder, ThreadPoolExecutor(1) as claimer:
        # Holding the worker's row stops the claim in its last part, after it has read the caps.
        holder.execute("SELECT 1 FROM workers WHERE id = %s FOR UPDATE", [WORKER])
        claiming = claimer.submit(claim)
        deadline = time.monotonic() + 5
        while not (waiting := _turn_holders_waiting_for_a_row(db, held)):
            assert time.monotonic() < deadline, "the claim never waited on the worker's row"
            time.sleep(0.01)
        # The backend stuck in the claim is the one holding the workload's turn.
        assert waiting == 1
        holder.rollback()
        assert len(claiming.result(timeout=5)) == 1
    assert _turn_holders_waiting_for_a_row(db, held) == 0
    assert db.execute(
        "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND classid = %s",
        [locks.CLAIM],
    ).fetchone() == {"n": 0}


def _turn_holders_waiting_for_a_row(db, held: dict) -> int:
    """How many backends hold the workload's claim turn while waiting for another's lock."""
    return db.execute(
        """
        SELECT count(*) AS n FROM pg_locks turn
        JOIN pg_stat_activity a ON a.pid = turn.pid
        WHERE turn.locktype = 'advisory' AND turn.granted
          AND turn.classid::int = %(classid)s AND turn.objid::int = hashtext(%(key)s)
          AND a.wait_event_type = 'Lock'
        """,
        held,
    ).fetchone()["n"]


# --- lease expiry -----------------------------------------------------------------------------


def test_an_expired_lease_returns_the_task_to_pending_for_another_worker(
    rt, submit, claim, task_row, db
):
    submit(manifest(1))
    [first] = claim(WORKER)

    expired = tasks.expire_leases(rt, now=later())

    assert [(e.task.id, e.worker_id, e.task.status) for e in expired] == [
        (uuid.UUID(first["task_id"]), WORKER, "pending")
    ]
    row = task_row(first["task_id"])
    assert (row["status"], row["lease_owner"], row["lease_expires_at"]) == ("pending", None, None)
    assert (row["attempt"], row["lost_retries"], row["error_code"]) == (1, 1, "lease_expired")
    attempt = db.execute(
        "SELECT outcome, error_code FROM task_attempts WHERE task_id = %s", (first["task_id"],)
    ).fetchone()
    assert attempt == {"outcome": "lease_expired", "error_code": "lease_expired"}
    [again] = claim(OTHER_WORKER)
    assert (again["task_id"], again["attempt"]) == (first["task_id"], 2)


def test_a_lease_that_has_not_run_out_is_not_expired(rt, submit, claim, task_row):
    submit(manifest(1))
    [leased] = claim(WORKER)

    assert tasks.expire_leases(rt) == []
    assert task_row(leased["task_id"])["status"] == "leased"


def test_the_second_lost_lease_fails_the_task_and_the_job_with_lease_expired(
    rt, submit, claim, task_row, job_row
):
    assert tasks.LOST_RETRY_BUDGET == 1
    job = submit(manifest(3, max_attempts=5))
    [first] = claim(WORKER)
    tasks.expire_leases(rt, now=later())
    [second] = claim(OTHER_WORKER)
    assert second["task_id"] == first["task_id"]

    [expired] = tasks.expire_leases(rt, now=later())

    assert expired.task.status == "failed"
    row = task_row(first["task_id"])
    assert (row["status"], row["error_code"], row["lost_retries"]) == ("failed", "lease_expired", 2)
    failed_job = job_row(job["id"])
    assert failed_job["status"] == "failed"
    assert failed_job["error"]["code"] == "attempts_exhausted"
    assert failed_job["error"]["details"]["error_code"] == "lease_expired"
    assert failed_job["error"]["details"]["task_id"] == first["task_id"]
    others = [task_row(str(jobs.task_id(uuid.UUID(job["id"]), n)))["status"] for n in (1, 2)]
    assert others == ["cancelled", "cancelled"]


def test_a_lease_lost_on_the_last_attempt_fails_the_task_at_once(rt, submit, claim, task_row):
    submit(manifest(1, max_attempts=1))
    [leased] = claim(WORKER)

    [expired] = tasks.expire_leases(rt, now=later())

    assert expired.task.status == "failed"
    assert task_row(leased["task_id"])["error_code"] == "lease_expired"


def test_a_job_that_cannot_be_settled_holds_back_only_its_own_expired_leases(
    rt, submit, claim, task_row, job_row, monkeypatch
):
    stuck = submit(manifest(1, max_attempts=1))
    other = submit(manifest(1, max_attempts=1))
    [stuck_lease] = claim(WORKER)  # leased first, so its lease runs out first and is swept first
    [other_lease] = claim(WORKER)
    settle = settlement.settle

    def settle_all_but_stuck(conn, job, rules):
        if str(job.id) == stuck["id"]:
            raise RuntimeError("this job cannot be settled")
        return settle(conn, job, rules)

    monkeypatch.setattr(settlement, "settle", settle_all_but_stuck)
    with pytest.raises(RuntimeError, match="cannot be settled"):
        tasks.expire_leases(rt, now=later())

    assert task_row(other_lease["task_id"])["status"] == "failed"
    assert job_row(other["id"])["status"] == "failed"
    # Nothing of the stuck job's expiry is half written: its lease waits for the next pass.
    assert task_row(stuck_lease["task_id"])["status"] == "leased"
    assert job_row(stuck["id"])["status"] == "running"
    monkeypatch.setattr(settlement, "settle", settle)
    [expired] = tasks.expire_leases(rt, now=later())
    assert (str(expired.task.job_id), job_row(stuck["id"])["status"]) == (stuck["id"], "failed")


def test_a_sweep_leaves_a_job_locked_by_a_completion_alone_instead_of_deadlocking_with_it(
    rt, submit, claim, task_row, database_url
):
    # A completion locks the job, then its task. A sweep that locked the task first and then
    # waited for the job would deadlock with it (the last attempt's expiry settles the job).
    job = submit(manifest(1, max_attempts=1))
    [leased] = claim(WORKER)
    with psycopg.connect(database_url) as completing, ThreadPoolExecutor(1) as sweeper:
        completing.execute("SELECT id FROM jobs WHERE id = %s FOR UPDATE", (job["id"],))
        sweep = sweeper.submit(tasks.expire_leases, rt, now=later())
        try:
            assert sweep.result(timeout=5) == []
            # The completion's next step; it would wait on a task lock held by the sweep.
            completing.execute(
                "UPDATE tasks SET version = version + 1 WHERE id = %s", (leased["task_id"],)
            )
        finally:
            completing.rollback()

    assert task_row(leased["task_id"])["status"] == "leased"
    [expired] = tasks.expire_leases(rt, now=later())  # the next sweep, once the job is free
    assert (str(expired.task.id), expired.task.status) == (leased["task_id"], "failed")


def test_the_old_holder_of_an_expired_lease_is_fenced_off(rt, submit, claim, task_call, task_row):
    submit(manifest(1))
    [first] = claim(WORKER)
    tasks.expire_leases(rt, now=later())
    [second] = claim(OTHER_WORKER)
    before = task_row(first["task_id"])

    response = task_call(
        first["task_id"],
        "heartbeat",
        {"worker_id": WORKER, "attempt": first["attempt"], "lease_token": first["lease_token"]},
    )

    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "stale_attempt"
    assert task_row(first["task_id"]) == before
    assert before["lease_owner"] == OTHER_WORKER and before["attempt"] == second["attempt"]


# --- claim order ------------------------------------------------------------------------------


def claim_all_in_order(claim, complete, count: int) -> list[tuple[str, int]]:
    """Claim and complete one task at a time, recording (job_id, chunk_index) in claim order."""
    order = []
    for _ in range(count):
        [leased] = claim(WORKER)
        order.append((leased["job_id"], leased["chunk_index"]))
        complete(leased)
    assert claim(WORKER) == []
    return order


def test_a_later_high_priority_job_is_leased_before_an_earlier_low_priority_one(
    submit, claim, complete
):
    low = submit(manifest(3, priority=10))
    high = submit(manifest([2, 0, 1], priority=200))

    order = claim_all_in_order(claim, complete, 6)

    assert order == [
        (high["id"], 0),
        (high["id"], 1),
        (high["id"], 2),
        (low["id"], 0),
        (low["id"], 1),
        (low["id"], 2),
    ]


def test_tasks_of_one_job_are_leased_in_chunk_order_whatever_the_manifest_order(
    submit, claim, complete
):
    job = submit(manifest([7, 3, 9, 0, 5]))

    order = claim_all_in_order(claim, complete, 5)

    assert order == [(job["id"], n) for n in (0, 3, 5, 7, 9)]


def test_jobs_of_equal_priority_are_leased_oldest_first(submit, claim, complete):
    first = submit(manifest(2))
    second = submit(manifest(2))

    order = claim_all_in_order(claim, complete, 4)

    assert order == [(first["id"], 0), (first["id"], 1), (second["id"], 0), (second["id"], 1)]


# --- long-polling -----------------------------------------------------------------------------


def test_a_long_poll_claim_wakes_promptly_when_another_coordinator_creates_a_job(
    rt, user, client, headers
):
    # A second coordinator on the same database: its only way to wake us is NOTIFY.
    elsewhere = replace(rt, wakeups=Wakeups(None))
    created_at: list[float] = []

    def create_soon() -> None:
        time.sleep(0.2)
        jobs.create_job(elsewhere, user, echo_spec(1), trace_id=uuid.uuid4().hex)
        created_at.append(time.monotonic())

    creator = threading.Thread(target=create_soon)
    started = time.monotonic()
    creator.start()
    response = client.post(
        "/api/v1/tasks/claim",
        headers=headers["worker"],
        json={"worker_id": WORKER, "workloads": ["echo"], "wait_seconds": 5},
    )
    answered = time.monotonic()
    creator.join()

    assert response.status_code == 200
    assert len(response.get_json()["tasks"]) == 1
    assert answered - started < 1.5
    # The claim's own re-check runs once a second; a NOTIFY wakes it well before that.
    assert answered - created_at[0] < 0.5


def test_a_long_poll_claim_on_an_empty_queue_answers_204_after_wait_seconds(client, headers):
    started = time.monotonic()
    response = client.post(
        "/api/v1/tasks/claim",
        headers=headers["worker"],
        json={"worker_id": WORKER, "workloads": ["echo"], "wait_seconds": 2},
    )
    elapsed = time.monotonic() - started

    assert response.status_code == 204
    assert 1.9 <= elapsed < 3.0
