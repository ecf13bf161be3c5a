"""Coordinator SIGKILL before and during a merge: a new coordinator finishes it exactly once.

The kill takes the coordinator's whole process group (the gunicorn master and its workers),
as tests/e2e does; a master killed alone leaves workers holding the port (issue 16, part 3).
"""

from __future__ import annotations

import signal
import time

from bench.reliability.figures import spread, tally
from bench.reliability.harness import Bench, Rig
from devstack.sample_csv import generate_csv
from tests.e2e.test_fault_tolerance import MERGE_HOLD

RECORDS, CHUNKS = 20_003, 4
JOB_TIMEOUT = 45

HOLD_MERGE_SQL = f"""
    CREATE OR REPLACE FUNCTION reliability_hold_merge() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN PERFORM pg_advisory_xact_lock_shared({MERGE_HOLD}); RETURN NEW; END $$;
    CREATE TRIGGER reliability_hold_merge BEFORE UPDATE ON jobs FOR EACH ROW
        WHEN (NEW.status = 'succeeded') EXECUTE FUNCTION reliability_hold_merge();
"""


def kill_around_merge(bench: Bench) -> dict:
    """N rounds each of a kill with the last result in flight, and a kill inside the merge."""
    data = generate_csv(RECORDS, seed=19)
    with bench.rig("coordinator-kills") as rig:
        for moment in ("before_merge", "during_merge"):
            for _ in range(bench.rounds):
                action = _before_merge if moment == "before_merge" else _during_merge
                rig.run_round(lambda n, a=action: a(rig, data, n), moment=moment)
        rounds = rig.rounds
    by_moment = {
        m: [r for r in rounds if r["moment"] == m] for m in ("before_merge", "during_merge")
    }
    return {
        "description": (
            f"A job of {RECORDS:,} records in {CHUNKS} chunks. Before the merge: one worker "
            f"completes {CHUNKS - 1} chunks and exits, a second takes the last one and holds its "
            "result for 2 s (`--fault pause-after-compute=2`); the coordinator is SIGKILLed "
            "then, with that result still to send, and a new coordinator is started on the same "
            "port. During the merge: a trigger holds the merge's final UPDATE inside its "
            "transaction (every chunk committed, job `merging`), the coordinator is SIGKILLed, "
            "the hold is released and a new coordinator started. `ready_s` is from the kill to "
            "the new coordinator's first `/readyz` 200; `succeeded_events` counts `job.succeeded` "
            "in the outbox (1 = merged once)."
        ),
        "rounds": rounds,
        "figures": {
            moment: {
                "ready_s": spread(r.get("ready_s") for r in group),
                "job_after_kill_s": spread(r.get("job_after_kill_s") for r in group),
                "succeeded_events": tally(r.get("succeeded_events") for r in group),
                "exact": sum(bool(r.get("exact")) for r in group),
            }
            for moment, group in by_moment.items()
        },
    }


def _restart_coordinator(rig: Rig, n: int) -> tuple[float, float]:
    """SIGKILL the running coordinator's group and start another; (killed at, seconds to ready)."""
    running = [
        name
        for name, p in rig.stack.processes.items()
        if name.startswith("coordinator") and p.poll() is None
    ]
    for name in running:
        rig.stack.kill(name, signal.SIGKILL)
    killed_at = time.monotonic()
    rig.stack.start_coordinator(f"coordinator-r{n}")
    return killed_at, time.monotonic() - killed_at


def _before_merge(rig: Rig, data: bytes, n: int) -> dict:
    job = rig.jobs.submit(data, CHUNKS)
    first = rig.worker(f"first-{n}", "--capacity", "1", "--max-tasks", str(CHUNKS - 1))
    first.wait(timeout=30)
    last = f"last-{n}"
    rig.worker(last, "--capacity", "1", "--max-tasks", "1", "--fault", "pause-after-compute=2")
    deadline = time.monotonic() + 20
    while not rig.events(last, "fault"):
        if time.monotonic() > deadline:
            raise TimeoutError("the last worker never computed its chunk")
        time.sleep(0.02)
    status_at_kill = rig.db.execute(
        "SELECT status FROM jobs WHERE id = %s", (job["id"],)
    ).fetchone()
    killed_at, ready = _restart_coordinator(rig, n)
    done = rig.wait_job(job["id"], timeout=JOB_TIMEOUT)
    return _outcome(rig, job, data, done, killed_at, ready, status_at_kill["status"])


def _during_merge(rig: Rig, data: bytes, n: int) -> dict:
    rig.db.execute(HOLD_MERGE_SQL)
    rig.db.execute("SELECT pg_advisory_lock(%s)", (MERGE_HOLD,))
    try:
        job = rig.jobs.submit(data, CHUNKS)
        rig.worker(f"worker-{n}", "--capacity", "2")
        rig.wait_task(
            "SELECT 1 FROM jobs j WHERE j.id = %s AND j.status = 'merging' "
            "AND j.chunks_completed = j.chunks_total AND EXISTS (SELECT 1 FROM pg_locks l "
            "WHERE l.locktype = 'advisory' AND l.objid = %s AND NOT l.granted)",
            (job["id"], MERGE_HOLD),
            30,
            "the merge to block mid-transaction",
        )
        status_at_kill = "merging"
        for name, p in list(rig.stack.processes.items()):
            if name.startswith("coordinator") and p.poll() is None:
                rig.stack.kill(name, signal.SIGKILL)
    finally:
        rig.db.execute("SELECT pg_advisory_unlock(%s)", (MERGE_HOLD,))
        rig.db.execute("DROP TRIGGER IF EXISTS reliability_hold_merge ON jobs")
    killed_at = time.monotonic()
    rig.stack.start_coordinator(f"coordinator-r{n}")
    ready = time.monotonic() - killed_at
    done = rig.wait_job(job["id"], timeout=JOB_TIMEOUT)
    return _outcome(rig, job, data, done, killed_at, ready, status_at_kill)


def _outcome(rig, job, data, done, killed_at, ready, status_at_kill) -> dict:
    events = rig.outbox(job["id"])
    last_attempts = rig.db.execute(
        "SELECT count(*) AS n FROM task_attempts a JOIN tasks t ON t.id = a.task_id "
        "WHERE t.job_id = %s",
        (job["id"],),
    ).fetchone()["n"]
    return {
        "status_at_kill": status_at_kill,
        "ready_s": round(ready, 2),
        "job_after_kill_s": round(time.monotonic() - killed_at, 2),
        "attempts": last_attempts,
        "succeeded_events": events.count("job.succeeded"),
        "exact": rig.exact(done, data) and events.count("job.succeeded") == 1,
    }
