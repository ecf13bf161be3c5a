"""Races: cancel against the last commit, one key submitted 50 times at once, the admission cap."""

from __future__ import annotations

import hashlib
import random
import threading
import time

from bench.reliability.figures import spread, tally
from bench.reliability.harness import Bench, Rig
from devstack.sample_csv import generate_csv
from services.archive import archive_path

JOB_TIMEOUT = 30
SAME_KEY_CLIENTS = 50
CAP, CAP_JOBS, CAP_CHUNKS = 8, 6, 3  # six 3-chunk jobs against 8 queued chunks: two fit


def cancel_race(bench: Bench) -> dict:
    """Cancel a one-chunk job around the moment its worker commits the result."""
    with bench.rig("cancel-race") as rig:
        for _ in range(bench.rounds * 3):
            rig.run_round(lambda n: _cancel_round(rig, n))
        rounds = rig.rounds
    return {
        "description": (
            "A one-chunk job of 5,000 records. Its worker computes the chunk and waits 1 s "
            "(`--fault pause-after-compute=1`) before committing it; the cancel is sent "
            "0.6-1.4 s (uniformly at random) after the compute, so it lands just before or "
            "just after the commit. Each round must end in exactly one outcome: `cancelled` "
            "with no result, no partial result and no `job.succeeded` event, or `succeeded` "
            "with the sequential result and no `job.cancelled` event."
        ),
        "rounds": rounds,
        "figures": {
            "outcomes": tally(r.get("outcome") for r in rounds),
            "cancel_answers": tally(r.get("cancel_answer") for r in rounds),
            "exactly_one_outcome": sum(bool(r.get("exact")) for r in rounds),
        },
    }


def _cancel_round(rig: Rig, n: int) -> dict:
    data = generate_csv(5_000, seed=100 + n)
    job = rig.jobs.submit(data, 1)
    name = f"racer-{n}"
    process = rig.worker(
        name, "--capacity", "1", "--max-tasks", "1", "--fault", "pause-after-compute=1"
    )
    deadline = time.monotonic() + 20
    while not rig.events(name, "fault"):
        if time.monotonic() > deadline:
            raise TimeoutError("the worker never computed the chunk")
        time.sleep(0.01)
    delay = random.uniform(0.6, 1.4)
    time.sleep(delay)
    answer = rig.jobs.session.post(f"{rig.stack.url}/api/v1/jobs/{job['id']}/cancel", timeout=10)
    code = answer.json().get("error", {}).get("code") if answer.status_code != 200 else None
    done = rig.wait_job(job["id"], timeout=JOB_TIMEOUT)
    process.wait(timeout=20)
    time.sleep(0.3)  # a result still on its way would have landed by now
    final = rig.jobs.get(job["id"])
    events = rig.outbox(job["id"])
    summaries = rig.db.execute(
        "SELECT count(*) AS n FROM chunk_summaries WHERE job_id = %s", (job["id"],)
    ).fetchone()["n"]
    if final["status"] == "cancelled":
        exact = (
            final["result"] is None
            and final["partial_result"] is None
            and "job.succeeded" not in events
            and events.count("job.cancelled") == 1
        )
    else:
        exact = (
            rig.exact(final, data)
            and "job.cancelled" not in events
            and events.count("job.succeeded") == 1
        )
    return {
        "cancel_after_s": round(delay, 2),
        "cancel_answer": f"{answer.status_code}" + (f" {code}" if code else ""),
        "outcome": final["status"],
        "summaries": summaries,
        "worker_saw": tally(
            ":".join(filter(None, (e["event"], e.get("code") or e.get("reason"))))
            for e in rig.events(name, "lease_lost", "dropped", "submitted")
        ),
        "exact": exact and final["status"] == done["status"],
    }


def same_key_submits(bench: Bench) -> dict:
    """50 clients POST the same upload with the same Idempotency-Key at once."""
    data = generate_csv(2_000, seed=23)
    with bench.rig("same-key") as rig:
        for _ in range(bench.rounds):
            rig.run_round(lambda n: _same_key_round(rig, data, n))
        rounds = rig.rounds
    return {
        "description": (
            f"{SAME_KEY_CLIENTS} threads, each with its own connection, released by one barrier, "
            "POST the same 2,000-record CSV with the same `Idempotency-Key`. Exactly one job row, "
            "one set of chunks and one `job.created` event must exist, and every answer must "
            "name that job."
        ),
        "rounds": rounds,
        "figures": {
            "answers": tally(
                s for r in rounds for s, k in r.get("answers", {}).items() for _ in range(k)
            ),
            "jobs_created": tally(r.get("jobs") for r in rounds),
            "seconds": spread(r.get("seconds") for r in rounds),
        },
    }


def _same_key_round(rig: Rig, data: bytes, n: int) -> dict:
    key = f"reliability-same-key-{n}"
    answers: list = [None] * SAME_KEY_CLIENTS
    barrier = threading.Barrier(SAME_KEY_CLIENTS)

    def submit(i: int) -> None:
        session = rig.stack.api()
        barrier.wait(timeout=30)
        try:
            answers[i] = rig.jobs.post(data, 2, key=key, session=session)
        finally:
            session.close()

    started = time.monotonic()
    threads = [threading.Thread(target=submit, args=(i,)) for i in range(SAME_KEY_CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    seconds = time.monotonic() - started
    ids = {a.json().get("id") for a in answers if a is not None and a.status_code in (200, 201)}
    rows = rig.db.execute("SELECT id::text FROM jobs WHERE idempotency_key = %s", (key,)).fetchall()
    tasks = rig.db.execute(
        "SELECT count(*) AS n FROM tasks t JOIN jobs j ON j.id = t.job_id "
        "WHERE j.idempotency_key = %s",
        (key,),
    ).fetchone()["n"]
    created = rig.db.execute(
        "SELECT count(*) AS n FROM outbox o JOIN jobs j ON j.id = o.job_id "
        "WHERE j.idempotency_key = %s AND o.event = 'job.created'",
        (key,),
    ).fetchone()["n"]
    statuses = [a.status_code if a is not None else "none" for a in answers]
    return {
        "answers": tally(statuses),
        "distinct_ids": len(ids),
        "jobs": len(rows),
        "tasks": tasks,
        "created_events": created,
        "seconds": round(seconds, 2),
        "exact": (
            len(rows) == 1
            and ids == {rows[0]["id"]}
            and tasks == 2
            and created == 1
            and sorted(statuses, key=str) == [200] * (SAME_KEY_CLIENTS - 1) + [201]
        ),
    }


def admission_cap(bench: Bench) -> dict:
    """Six 3-chunk jobs at once against CHUNKWISE_MAX_QUEUED_CHUNKS=8: two fit, four get 429."""
    with bench.rig(
        "admission",
        env={"CHUNKWISE_MAX_QUEUED_CHUNKS": str(CAP), "CHUNKWISE_USER_MAX_QUEUED_PERCENT": "100"},
    ) as rig:
        for _ in range(bench.rounds):
            rig.run_round(lambda n: _admission_round(rig, n))
        rounds = rig.rounds
    return {
        "description": (
            f"With `CHUNKWISE_MAX_QUEUED_CHUNKS={CAP}` and no worker running, {CAP_JOBS} "
            f"clients submit different {CAP_CHUNKS}-chunk CSV jobs at once. A sampler counts "
            "the unfinished chunks every few milliseconds meanwhile (`max_queued`, never "
            "above the cap). Each 429 must carry `queue_full` and `Retry-After`, and leave "
            "no job row, no outbox event, no archived input and no spool behind. The "
            "admitted jobs are cancelled after the round, so each round starts empty."
        ),
        "rounds": rounds,
        "figures": {
            "answers": tally(
                s for r in rounds for s, k in r.get("answers", {}).items() for _ in range(k)
            ),
            "max_queued": max((r.get("max_queued", 0) for r in rounds), default=0),
            "cap": CAP,
            "refusals_leaving_nothing": sum(r.get("clean_refusals", 0) for r in rounds),
        },
    }


def _admission_round(rig: Rig, n: int) -> dict:
    uploads = [generate_csv(600, seed=1000 * n + i) for i in range(CAP_JOBS)]
    answers: list = [None] * CAP_JOBS
    barrier = threading.Barrier(CAP_JOBS)
    sampling = threading.Event()
    peaks: list[int] = []

    def submit(i: int) -> None:
        session = rig.stack.api()
        barrier.wait(timeout=30)
        try:
            answers[i] = rig.jobs.post(uploads[i], CAP_CHUNKS, session=session)
        finally:
            session.close()

    def sample() -> None:
        from bench.reliability.harness import connect

        with connect(rig.database_url) as conn:
            while not sampling.is_set():
                peaks.append(
                    conn.execute(
                        "SELECT count(*) AS n FROM tasks WHERE workload = 'csv_stats' "
                        "AND status IN ('pending', 'leased')"
                    ).fetchone()["n"]
                )
                time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    threads = [threading.Thread(target=submit, args=(i,)) for i in range(CAP_JOBS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    time.sleep(0.1)
    sampling.set()
    sampler.join(timeout=10)

    admitted = [a.json()["id"] for a in answers if a is not None and a.status_code == 201]
    clean = 0
    for upload, answer in zip(uploads, answers, strict=True):
        if answer is None or answer.status_code != 429:
            continue
        digest = hashlib.sha256(upload).hexdigest()
        jobs = rig.db.execute(
            "SELECT count(*) AS n FROM jobs WHERE input_sha256 = %s", (digest,)
        ).fetchone()["n"]
        clean += (
            answer.json()["error"]["code"] == "queue_full"
            and bool(answer.headers.get("Retry-After"))
            and jobs == 0
            and not archive_path(rig.stack.run_dir / "archive", digest).exists()
        )
    refused = sum(1 for a in answers if a is not None and a.status_code == 429)
    outbox = rig.db.execute(
        "SELECT count(*) AS n FROM outbox WHERE event = 'job.created' AND job_id = ANY(%s::uuid[])",
        (admitted,),
    ).fetchone()["n"]
    spools = [p.name for p in (rig.stack.run_dir / "tmp").glob("*") if p.is_file()]
    for job_id in admitted:
        rig.jobs.session.post(f"{rig.stack.url}/api/v1/jobs/{job_id}/cancel", timeout=10)
    all_created = rig.db.execute(
        "SELECT count(*) AS n FROM jobs WHERE created_at > now() - interval '1 hour'"
    ).fetchone()["n"]
    return {
        "answers": tally(a.status_code if a is not None else "none" for a in answers),
        "max_queued": max(peaks, default=0),
        "samples": len(peaks),
        "clean_refusals": clean,
        "leftover_spools": len(spools),
        "exact": (
            max(peaks, default=0) <= CAP
            and len(admitted) * CAP_CHUNKS <= CAP
            and len(admitted) == CAP // CAP_CHUNKS
            and clean == refused == CAP_JOBS - len(admitted)
            and outbox == len(admitted)
            and all_created == len(admitted) * n
            and not spools
        ),
    }
