"""The worker protocol beside another revision's, in alternating turns (make bench-queue's
latencies, side by side).

python -m bench.queue_compare <worktree> [--turns 5] [--seconds 3] [--fetch [both]]
    [--capacity 100]

<worktree> is a checkout of the revision to compare with (for example
`git worktree add /work/wt/base37 5a08c3f`). Each side runs its own coordinator, started by
its own tree's devstack on a database of its own on one server; then, turn by turn, each side
is measured in its turn (the side that goes first alternates): a one-task claim's latency,
100 leases renewed one heartbeat at a time and in one batch, a one-task job's submission and
its idle pickup, and a short no-op drain at 4 threads, each holding up to --capacity tasks
(with --fetch, this tree's drain completes and fetches; with --fetch both, both sides'). A
drain's CPU is split per task: the coordinator's, the database backends', the drain loops'
own (this process), and the machine's idle time.
First each side takes one turn on its fresh pool and 300 more submissions (printed apart, not
in the medians: a prepared statement's first five uses on each pooled connection are planned
afresh, once per connection an hour, a cost the last line prints on its own). Every turn is
printed, then each figure's median and range per side and the median of the turns' ratios
(this tree ÷ the other): on a shared machine, figures taken minutes apart differ more than the
code does.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench.cpu import machine_idle_seconds, process_seconds
from bench.queue import (
    CLAIM_CAPACITY,
    WORKLOAD,
    children,
    complete,
    drain,
    idle_pickup_times,
    lease,
    noop_loops,
    scratch_database,
    submit_noop_jobs,
)
from devstack.stack import REPO, LocalStack, Tokens, database_url, stop_on_sigterm

THREADS = 4
# Enough one-task submissions after the warm-up turn for every pooled connection (10 per
# process) to have planned the admission five times.
WARM_SUBMITS = 300
# The tasks queued before each drain: more than a short drain at 4 threads gets through.
QUEUED = 20_000
# Started inside each tree, with that tree's own devstack, so each side migrates and seeds
# its own schema; it prints the port and tokens, then serves until its stdin closes.
SERVE = """
import json, sys
from pathlib import Path
from devstack.stack import LocalStack
stack = LocalStack(database_url=sys.argv[1], run_dir=Path(sys.argv[2]), env=json.loads(sys.argv[3]))
try:
    stack.prepare()
    stack.start_coordinator()
    started = {"port": stack.port, "tokens": vars(stack.tokens)}
    print(json.dumps({**started, "master": stack.processes["coordinator"].pid}), flush=True)
    sys.stdin.read()
finally:
    stack.stop()
"""
ENV = {"CHUNKWISE_ALLOWED_WORKLOADS": WORKLOAD, "CHUNKWISE_LOG_LEVEL": "WARNING"}
# One user queues every drain's tasks: the queue's speed, not its share (a setting code
# before issue 37 does not know, and refuses as a typo).
USER_QUOTA = "CHUNKWISE_USER_MAX_QUEUED_PERCENT"
FIGURES = {
    "submit_ms": "submit (one-task job) p50, ms",
    "submit_coordinator_us": "  coordinator CPU per submit, us",
    "submit_database_us": "  database CPU per submit, us",
    "claim_ms": "claim (one task) p50, ms",
    "claim_coordinator_us": "  coordinator CPU per claim, us",
    "claim_database_us": "  database CPU per claim, us",
    "batch_ms": "100 heartbeats in one batch p50, ms",
    "batch_coordinator_us": "  coordinator CPU per batch, us",
    "batch_database_us": "  database CPU per batch, us",
    "pickup_ms": "idle pickup p50, ms",
    "pickup_submit_ms": "  its submit p50, ms",
    "tasks_per_s": f"no-op tasks/s, {THREADS} threads",
    "coordinator_us_per_task": "  coordinator CPU per task, us",
    "database_us_per_task": "  database CPU per task, us",
    "clients_us_per_task": "  the loops' own CPU per task, us",
    "idle_us_per_task": "  idle CPU per task (all cores), us",
}


def main(argv: list[str] | None = None) -> None:
    """Start both sides, measure them in alternating turns, print every turn and the summary."""
    parser = argparse.ArgumentParser(prog="python -m bench.queue_compare")
    parser.add_argument("tree", type=Path, help="a worktree of the revision to compare with")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each drain")
    parser.add_argument(
        "--fetch",
        nargs="?",
        const="head",
        choices=("head", "both"),
        help="this tree's drain (or both sides') completes and fetches"
        " (POST /api/v1/tasks/results?claim=N)",
    )
    parser.add_argument(
        "--capacity", type=int, default=CLAIM_CAPACITY, help="tasks each drain loop holds"
    )
    args = parser.parse_args(argv)
    stop_on_sigterm()
    run_dir = Path(tempfile.mkdtemp(prefix="chunkwise-bench-compare-"))
    server = database_url(run_dir)
    sides = {"base": args.tree.resolve(), "head": REPO}
    print(f"base: {sides['base']} ({revision(sides['base'])}); head: {REPO} ({revision(REPO)})")
    turns: dict[str, list[dict]] = {name: [] for name in sides}
    with (
        scratch_database(server) as base_url,
        scratch_database(server) as head_url,
        serve(sides["base"], base_url, run_dir / "base") as base,
        serve(REPO, head_url, run_dir / "head") as head,
    ):
        stacks = {"base": base, "head": head}
        fresh = {name: warm_up(*stacks[name], args.seconds) for name in sides}
        for n in range(args.turns):
            order = ("base", "head") if n % 2 == 0 else ("head", "base")
            for name in order:
                fetch = args.fetch == "both" or (args.fetch == "head" and name == "head")
                figures = one_turn(*stacks[name], args.seconds, fetch, args.capacity)
                turns[name].append(figures)
                print(f"turn {n + 1} {name}: {json.dumps(figures)}", flush=True)
    shutil.rmtree(run_dir, ignore_errors=True)
    print_summary(turns)
    print(
        "a fresh pool's turn (not in the medians above): head/base "
        + ", ".join(
            f"{FIGURES[key].strip()} {fresh['head'][key] / fresh['base'][key]:.2f}x"
            for key in ("submit_ms", "submit_database_us", "pickup_submit_ms")
            if fresh["base"][key]
        )
    )


def warm_up(stack: LocalStack, master: int, seconds: float) -> dict:
    """One turn on a fresh pool, then WARM_SUBMITS submissions: PostgreSQL plans a prepared
    statement afresh on each of a connection's first five uses, so a fresh pool's first turn
    measures that, once per connection, rather than the calls' steady cost. Returns the turn."""
    figures = one_turn(stack, master, seconds)
    print(f"warm-up turn on a fresh pool ({stack.url}): {json.dumps(figures)}", flush=True)
    session = stack.api()
    for _ in range(WARM_SUBMITS):
        submit_noop_jobs(stack, 1, session=session)
    drain(stack)
    return figures


def revision(tree: Path) -> str:
    """The tree's commit, short."""
    return subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


@contextmanager
def serve(tree: Path, url: str, run_dir: Path) -> Iterator[tuple[LocalStack, int]]:
    """A coordinator of `tree`'s code on `url`; yields a stack to call it (as a client only)
    and the pid of its gunicorn master."""
    env = dict(ENV)
    if USER_QUOTA in (tree / "app" / "config.py").read_text():
        env[USER_QUOTA] = "100"
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE, url, str(run_dir), json.dumps(env)],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        started = json.loads(process.stdout.readline() or "null")
        if started is None:
            raise RuntimeError(f"the coordinator of {tree} did not start (see {run_dir}/logs)")
        stack = LocalStack(
            database_url=url,
            run_dir=run_dir,
            port=started["port"],
            tokens=Tokens(**started["tokens"]),
        )
        yield stack, started["master"]
    finally:
        process.stdin.close()
        process.wait(timeout=60)


def one_turn(
    stack: LocalStack,
    master: int,
    seconds: float,
    fetch: bool = False,
    capacity: int = CLAIM_CAPACITY,
) -> dict:
    """One turn's figures for one side: milliseconds, and CPU microseconds per call spent by
    the coordinator's processes and by its database backends (`fetch`: the drain completes
    and fetches; `capacity`: the tasks each drain loop holds)."""
    cpu = Cpu(stack, master)
    figures: dict = {}
    # One-task jobs submitted back to back, then claimed one at a time (each completed after).
    submitted = cpu.timed(lambda: submit_noop_jobs(stack, 1, session=stack.api()), calls=30)
    figures.update(submitted.as_figures("submit"))
    session = stack.api(stack.tokens.worker)

    def claim_one() -> list[dict]:
        return session.post(
            f"{stack.url}/api/v1/tasks/claim",
            json={"worker_id": "bench-latency", "workloads": [WORKLOAD], "capacity": 1},
            timeout=30,
        ).json()["tasks"]

    claimed = cpu.timed(claim_one, calls=30)
    figures.update(claimed.as_figures("claim"))
    complete(stack, "bench-latency", [t for tasks in claimed.answers for t in tasks])
    figures.update(heartbeat_batch(stack, cpu).as_figures("batch"))
    pickups, submits = idle_pickup_times(stack, rounds=8)
    figures["pickup_ms"] = round(statistics.median(pickups), 2)
    figures["pickup_submit_ms"] = round(statistics.median(submits), 2)
    submit_noop_jobs(stack, QUEUED)
    before = cpu.sample()
    # The loops run in this process, which does nothing else meanwhile; idle is every core's.
    clients, idle = time.process_time(), machine_idle_seconds()
    started = time.monotonic()
    done = noop_loops(stack, THREADS, seconds, fetch, capacity)
    figures["tasks_per_s"] = round(done / (time.monotonic() - started))
    used = cpu.since(before)
    clients, idle = time.process_time() - clients, machine_idle_seconds() - idle
    drain(stack)
    figures["coordinator_us_per_task"] = round(used[0] / max(done, 1))
    figures["database_us_per_task"] = round(used[1] / max(done, 1))
    figures["clients_us_per_task"] = round(clients * 1e6 / max(done, 1))
    figures["idle_us_per_task"] = round(idle * 1e6 / max(done, 1))
    return figures


def heartbeat_batch(stack: LocalStack, cpu: Cpu, leases: int = 100) -> Timed:
    """`leases` leases renewed in one batch, five times."""
    submit_noop_jobs(stack, leases)
    session = stack.api(stack.tokens.worker)
    claimed = session.post(
        f"{stack.url}/api/v1/tasks/claim",
        json={"worker_id": "bench-beats", "workloads": [WORKLOAD], "capacity": leases},
        timeout=30,
    ).json()["tasks"]
    body = {"worker_id": "bench-beats", "heartbeats": [lease(t) for t in claimed]}
    renewed = cpu.timed(
        lambda: session.post(
            f"{stack.url}/api/v1/tasks/heartbeats", json=body, timeout=30
        ).raise_for_status(),
        calls=5,
    )
    complete(stack, "bench-beats", claimed)
    return renewed


@dataclass
class Timed:
    """Each call's milliseconds, and the CPU the calls took in all."""

    ms: list[float]
    coordinator_us: float
    database_us: float
    answers: list

    def as_figures(self, name: str) -> dict:
        """p50 milliseconds and CPU microseconds per call."""
        n = len(self.ms)
        return {
            f"{name}_ms": round(statistics.median(self.ms), 2),
            f"{name}_coordinator_us": round(self.coordinator_us / n),
            f"{name}_database_us": round(self.database_us / n),
        }


class Cpu:
    """CPU time of one side's coordinator processes and of its database backends, read from
    each process's CPU clock (exact, whatever else the machine runs)."""

    def __init__(self, stack: LocalStack, master: int):
        self.stack = stack
        self.coordinator = children(master)

    def backends(self) -> list[int]:
        """The server processes serving this side's clients now (not autovacuum: a worker
        that happens to be vacuuming the last drain's tasks is not a call's cost)."""
        with psycopg.connect(self.stack.database_url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND backend_type = 'client backend'"
            ).fetchall()
        return [r[0] for r in rows]

    def sample(self) -> tuple[list[int], float, float]:
        """The backends, and the seconds of CPU both sides have used so far."""
        backends = self.backends()
        return backends, process_seconds(self.coordinator), process_seconds(backends)

    def since(self, before: tuple[list[int], float, float]) -> tuple[float, float]:
        """Microseconds of CPU the coordinator and those backends used since `before`."""
        backends, coordinator, database = before
        return (
            (process_seconds(self.coordinator) - coordinator) * 1e6,
            (process_seconds(backends) - database) * 1e6,
        )

    def timed(self, call: Callable[[], object], calls: int) -> Timed:
        """Run `call` `calls` times, back to back."""
        before = self.sample()
        ms, answers = [], []
        for _ in range(calls):
            started = time.perf_counter()
            answers.append(call())
            ms.append((time.perf_counter() - started) * 1000)
        coordinator, database = self.since(before)
        return Timed(ms, coordinator, database, answers)


def print_summary(turns: dict[str, list[dict]]) -> None:
    """Each figure: per side the median and range of the turns, and head ÷ base."""
    print(f"{'figure':<36} {'base median (range)':>26} {'head median (range)':>26} head/base")
    for key, label in FIGURES.items():
        base = [t[key] for t in turns["base"]]
        head = [t[key] for t in turns["head"]]
        ratios = [h / b for h, b in zip(head, base, strict=True) if b]
        print(
            f"{label:<36} {spread(base):>26} {spread(head):>26} "
            f"{statistics.median(ratios):.2f}x (turns "
            + " / ".join(f"{r:.2f}" for r in ratios)
            + ")"
        )


def spread(values: list[float]) -> str:
    """'median (low-high)'."""
    return f"{statistics.median(values):g} ({min(values):g}-{max(values):g})"


if __name__ == "__main__":
    main()
