"""Worker faults: SIGKILL at each point of a chunk's life, at random moments, and a zombie."""

from __future__ import annotations

import os
import random
import signal
import time

from bench.reliability.figures import spread, tally
from bench.reliability.harness import Bench, Rig
from devstack.faults import SlowLink
from devstack.observe import scrape
from devstack.sample_csv import generate_csv

RECORDS, CHUNKS = 20_003, 2
TRANSFER_SECONDS = 3.0  # how long one chunk's input takes through the slow link
RANDOM_KILL_SECONDS = 4.5  # a little past the commit, so some random kills land after it
KILL_POINTS = ("after_claim", "mid_compute", "after_compute", "during_heartbeat", "random")
JOB_TIMEOUT = 45


def kill_points(bench: Bench) -> dict:
    """SIGKILL a worker holding a chunk at each point, then let a second worker finish the job."""
    rounds_by_point: dict[str, list[dict]] = {}
    data = generate_csv(RECORDS, seed=11)
    rate = int(len(data) / CHUNKS / TRANSFER_SECONDS)
    with bench.rig("worker-kills") as rig:
        link = SlowLink(rig.stack.port, rate)
        try:
            for point in KILL_POINTS:
                for _ in range(bench.rounds):
                    rig.run_round(
                        lambda n, p=point: _kill_round(rig, link, data, p, n), point=point
                    )
        finally:
            link.close()
        rounds = rig.rounds
    for record in rounds:
        rounds_by_point.setdefault(record["point"], []).append(record)
    return {
        "description": (
            f"A job of {RECORDS:,} records in {CHUNKS} chunks. A victim worker (capacity 1) "
            f"reads its chunk through a relay that slows its input to about "
            f"{TRANSFER_SECONDS:.0f} s, and is SIGKILLed: as soon as its lease is in the "
            "database (after claim); halfway through the input (mid-compute); by "
            "`--fault crash-after-compute` (after compute, before commit); the moment its first "
            "heartbeat's commit is seen (during heartbeat); or after a random "
            f"0-{RANDOM_KILL_SECONDS} s from its start (random, phase reported). A rescuer "
            "worker then finishes the job; `recovery_s` is from the kill to the job's success."
        ),
        "rounds": rounds,
        "figures": {
            point: {
                "recovery_s": spread(r.get("recovery_s") for r in group),
                "exact": sum(bool(r.get("exact")) for r in group),
                **({"phases": tally(r.get("phase") for r in group)} if point == "random" else {}),
            }
            for point, group in rounds_by_point.items()
        },
    }


def _kill_round(rig: Rig, link: SlowLink, data: bytes, point: str, n: int) -> dict:
    job = rig.jobs.submit(data, CHUNKS)
    victim = f"victim-{n}"
    args = ["--capacity", "1", "--max-tasks", "1"]
    if point == "after_compute":
        process = rig.worker(victim, *args, "--fault", "crash-after-compute")
        lease = rig.lease_of(victim)
        process.wait(timeout=30)  # it exits 17 on its own, right before its commit
        killed_at = time.monotonic()
    else:
        process = rig.worker(victim, *args, coordinator=link.url)
        started = time.monotonic()
        if point == "random":
            time.sleep(random.uniform(0.0, RANDOM_KILL_SECONDS))
            lease = None
        else:
            lease = rig.lease_of(victim)
            if point == "mid_compute":
                time.sleep(TRANSFER_SECONDS / 2)
            elif point == "during_heartbeat":
                rig.wait_task(
                    "SELECT 1 FROM tasks WHERE id = %s AND heartbeat_at > %s",
                    (lease["id"], lease["heartbeat_at"]),
                    10,
                    "a heartbeat",
                )
        rig.stack.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        if point == "random":
            lease = {"kill_after_s": round(killed_at - started, 2)}
    phase = _phase(rig, victim, job["id"])
    rig.worker(f"rescuer-{n}", "--capacity", "2")
    done = rig.jobs.wait(job["id"], "succeeded", "failed", "cancelled", timeout=JOB_TIMEOUT)
    recovery = time.monotonic() - killed_at
    attempts = [
        (a["worker_id"].split("-")[0], a["state"])
        for c in rig.jobs.chunks(job["id"])
        for a in c["attempts"]
    ]
    return {
        "phase": phase,
        "exit": process.returncode,
        "recovery_s": round(recovery, 2),
        "attempts": tally(f"{w}:{s}" for w, s in attempts),
        "exact": rig.exact(done, data),
        **({"kill_after_s": lease["kill_after_s"]} if point == "random" else {}),
    }


def _phase(rig: Rig, victim: str, job_id: str) -> str:
    """Where in the chunk's life the victim died, from the database and its log."""
    row = rig.db.execute(
        "SELECT a.outcome, t.status FROM task_attempts a JOIN tasks t ON t.id = a.task_id "
        "WHERE t.job_id = %s AND a.worker_id = %s",
        (job_id, victim),
    ).fetchone()
    if row is None:
        return "before_claim"
    if row["outcome"] == "completed":
        return "after_commit"
    if rig.events(victim, "computed"):
        return "after_compute"
    return "holding_lease"


def zombie(bench: Bench) -> dict:
    """SIGSTOP a worker past its lease, SIGCONT it once another finished: it changes nothing."""
    data = generate_csv(RECORDS, seed=13)
    with bench.rig("zombie") as rig:
        for _ in range(bench.rounds):
            rig.run_round(lambda n: _zombie_round(rig, data, n))
        rounds = rig.rounds
    return {
        "description": (
            "A worker computes its chunk and is SIGSTOPped right after (`--fault "
            "pause-after-compute=2` marks the moment and holds its heartbeats); it stays "
            "stopped until its lease has expired and a second worker has finished the job, then "
            "gets SIGCONT and sends its late result. `rejected` is the coordinator's "
            "`chunkwise_fenced_writes_rejected_total` increase by endpoint and code; "
            "`unchanged` compares the accepted summaries and the job row before and after."
        ),
        "rounds": rounds,
        "figures": {
            "stopped_s": spread(r.get("stopped_s") for r in rounds),
            "rejected": tally(
                code
                for r in rounds
                for code, k in r.get("rejected", {}).items()
                for _ in range(int(k))
            ),
            "unchanged": sum(bool(r.get("unchanged")) for r in rounds),
        },
    }


def _zombie_round(rig: Rig, data: bytes, n: int) -> dict:
    job = rig.jobs.submit(data, CHUNKS)
    before = _rejections(rig)
    zombie_name = f"zombie-{n}"
    process = rig.worker(
        zombie_name, "--capacity", "1", "--max-tasks", "1", "--fault", "pause-after-compute=2"
    )
    lease = rig.lease_of(zombie_name)
    _wait_log(rig, zombie_name, "fault", 20)
    os.kill(process.pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        rig.worker(f"steady-{n}", "--capacity", "2")
        done = rig.jobs.wait(job["id"], "succeeded", "failed", timeout=JOB_TIMEOUT)
        snapshot = _snapshot(rig, job["id"])
    finally:
        os.kill(process.pid, signal.SIGCONT)
    stopped = time.monotonic() - stopped_at
    process.wait(timeout=30)
    time.sleep(0.5)  # the relayed answer is counted when its request ends
    rejected = {
        key: int(count - before.get(key, 0))
        for key, count in _rejections(rig).items()
        if count > before.get(key, 0)
    }
    refused = [
        (e["event"], e.get("code")) for e in rig.events(zombie_name, "lease_lost", "dropped")
    ]
    unchanged = snapshot == _snapshot(rig, job["id"])
    return {
        "stopped_s": round(stopped, 2),
        "lease_attempt": lease["attempt"],
        "rejected": rejected,
        "zombie_saw": tally(f"{event}:{code}" for event, code in refused),
        "unchanged": unchanged,
        "exact": rig.exact(done, data) and unchanged and bool(rejected),
    }


def _wait_log(rig: Rig, name: str, event: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not rig.events(name, event):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} logged no {event} within {timeout} s")
        time.sleep(0.02)


def _rejections(rig: Rig) -> dict[str, float]:
    metrics = scrape(rig.stack)
    return {
        f"{s.labels['endpoint']}:{s.labels['code']}": s.value
        for s in metrics.samples
        if s.name == "chunkwise_fenced_writes_rejected_total"
    }


def _snapshot(rig: Rig, job_id: str) -> tuple:
    summaries = rig.db.execute(
        "SELECT task_id, attempt, summary, accepted_at FROM chunk_summaries WHERE job_id = %s "
        "ORDER BY chunk_index",
        (job_id,),
    ).fetchall()
    job = rig.db.execute(
        "SELECT status, revision, result, completed_at FROM jobs WHERE id = %s", (job_id,)
    ).fetchone()
    return (tuple(map(tuple, (r.values() for r in summaries))), tuple(job.values()))
