"""Coordinator SIGKILL before and during a merge: a new coordinator finishes it exactly once.

Before the merge only the gunicorn master is killed, as a crash would: its orphaned workers
drain what they accepted and give the port back (tests/e2e/test_coordinator_restart.py).
During the merge the whole process group is killed, so that the process inside the merge's
transaction dies with it and the new coordinator has to finish the merge.
"""

from __future__ import annotations

import os
import signal
import time

import psutil

from bench.reliability.figures import spread, tally
from bench.reliability.harness import Bench, Rig
from devstack.faults import HOLD_MERGE_SQL, MERGE_HOLD, RELEASE_MERGE_SQL, listening_pids, running
from devstack.sample_csv import generate_csv

RECORDS, CHUNKS = 20_003, 4
JOB_TIMEOUT = 45


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
            "result for 2 s (`--fault pause-after-compute=2`); the gunicorn master alone is "
            "SIGKILLed then, with that result still to send, and a new coordinator is started "
            "on the same port (`orphans_after_10s`: the old workers still running 10 s later). "
            "During the merge: a trigger holds the merge's final UPDATE inside its transaction "
            "(every chunk committed, job `merging`), the coordinator's whole process group is "
            "SIGKILLed, the hold is released and a new coordinator started. `ready_s` is from "
            "the kill until the new coordinator alone holds the port and answers `/readyz` 200; "
            "`succeeded_events` counts `job.succeeded` in the outbox (1 = merged once)."
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


def _kill_master_and_restart(rig: Rig, n: int) -> tuple[float, float, int]:
    """SIGKILL the master alone, start a new coordinator; (killed at, seconds until the new one
    alone owns the port and is ready, orphans left running 10 s later)."""
    [name] = [
        k
        for k, p in rig.stack.processes.items()
        if k.startswith("coordinator") and p.poll() is None
    ]
    master = rig.stack.processes.pop(name)
    orphans = [p.pid for p in psutil.Process(master.pid).children()]
    os.kill(master.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    master.wait(timeout=10)
    new_name = f"coordinator-r{n}"
    rig.stack.start_coordinator(new_name)
    new_group = rig.stack.processes[new_name].pid
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pids = listening_pids(rig.stack.port)
        if pids and all(running(p) and os.getpgid(p) == new_group for p in pids):
            break
        time.sleep(0.05)
    rig.stack.wait_ready()
    ready = time.monotonic() - killed_at
    while any(running(p) for p in orphans) and time.monotonic() < killed_at + 10:
        time.sleep(0.1)
    left = [p for p in orphans if running(p)]
    for pid in left:  # our own orphans; they must not outlive the round
        os.kill(pid, signal.SIGKILL)
    return killed_at, ready, len(left)


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
    killed_at, ready, orphans_left = _kill_master_and_restart(rig, n)
    done = rig.wait_job(job["id"], timeout=JOB_TIMEOUT)
    outcome = _outcome(rig, job, data, done, killed_at, ready, status_at_kill["status"])
    outcome["orphans_after_10s"] = orphans_left
    outcome["exact"] = outcome["exact"] and orphans_left == 0
    return outcome


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
        rig.db.execute(RELEASE_MERGE_SQL)
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
