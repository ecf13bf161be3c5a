"""A drain beside idle workers: what claims waiting on another workload cost the busy ones.

python -m bench.idle_waiters [--waiters 16] [--turns 4] [--seconds 3]

Starts a coordinator (make bench-queue's settings) on DATABASE_URL's server, or an embedded
one. In each turn, 4 no-op loops at capacity 8 complete and fetch for --seconds, once alone
and once while --waiters idle workers long-poll claims of a workload nobody submits to (each
honouring Retry-After, as chunkwise-worker does); which goes first alternates. Prints every
turn's tasks/s and the turns' ratios (with waiters ÷ alone), median and range.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

from bench.queue import STACK_ENV, WORKLOAD, drain, noop_loops, scratch_database, submit_noop_jobs
from bench.turns import ratios, spread
from devstack.stack import LocalStack, database_url, stop_on_sigterm

IDLE_WORKLOAD = "idle"
THREADS, CAPACITY = 4, 8
WAIT_SECONDS = 2


def main(argv: list[str] | None = None) -> None:
    """Take the turns and print every one."""
    parser = argparse.ArgumentParser(prog="python -m bench.idle_waiters")
    parser.add_argument("--waiters", type=int, default=16)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args(argv)
    stop_on_sigterm()
    run_dir = Path(tempfile.mkdtemp(prefix="chunkwise-bench-idle-"))
    env = {**STACK_ENV, "CHUNKWISE_ALLOWED_WORKLOADS": f"{WORKLOAD},{IDLE_WORKLOAD}"}
    rates: dict[int, list[float]] = {0: [], args.waiters: []}
    with scratch_database(database_url(run_dir)) as url:
        stack = LocalStack(database_url=url, run_dir=run_dir / "stack", env=env)
        try:
            stack.prepare()
            stack.start_coordinator()
            for turn in range(args.turns):
                order = [0, args.waiters] if turn % 2 == 0 else [args.waiters, 0]
                for waiters in order:
                    rate = drain_beside(stack, waiters, args.seconds)
                    rates[waiters].append(rate)
                    print(f"turn {turn + 1}, {waiters:2d} idle waiters: {rate:6.0f} tasks/s")
        finally:
            stack.stop()
    shutil.rmtree(run_dir, ignore_errors=True)
    print(f"alone: {spread(rates[0], ' tasks/s', 0)}")
    print(f"beside {args.waiters} idle waiters: {spread(rates[args.waiters], ' tasks/s', 0)}")
    print(f"with waiters / alone, turn by turn: {spread(ratios(rates[args.waiters], rates[0]))}")


def drain_beside(stack: LocalStack, waiters: int, seconds: float) -> float:
    """Tasks/s of the no-op loops while `waiters` idle workers long-poll another workload."""
    stop = threading.Event()

    def wait_idly(n: int) -> None:
        session = stack.api(stack.tokens.worker)
        body = {
            "worker_id": f"idle-{n}",
            "workloads": [IDLE_WORKLOAD],
            "capacity": 1,
            "wait_seconds": WAIT_SECONDS,
        }
        while not stop.is_set():
            answer = session.post(f"{stack.url}/api/v1/tasks/claim", json=body, timeout=30)
            if "Retry-After" in answer.headers:  # no waiting place free: as a worker would
                stop.wait(float(answer.headers["Retry-After"]))

    idle = [threading.Thread(target=wait_idly, args=(n,)) for n in range(waiters)]
    for thread in idle:
        thread.start()
    try:
        submit_noop_jobs(stack, 6_000)
        time.sleep(0.5)  # every waiter's claim is waiting by now
        started = time.monotonic()
        done = noop_loops(stack, THREADS, seconds, fetch=True, capacity=CAPACITY)
        return done / (time.monotonic() - started)
    finally:
        stop.set()
        for thread in idle:
            thread.join()
        drain(stack)


if __name__ == "__main__":
    main()
