"""A coordinator's memory over many drains, with glibc's default heaps and with two.

python -m bench.coordinator_memory [--drains 16] [--tasks 8000] [--seconds 6]

Starts two coordinators (make bench-queue's settings), each on a database of its own on
DATABASE_URL's server or an embedded one: one as glibc sets it up (a heap for each thread that
allocates, up to eight per core) and one with MALLOC_ARENA_MAX=2, as the image runs it. They
take turns: each drain queues --tasks no-op tasks on one and drains them with 4 loops at
capacity 8, completing and fetching. Prints the resident set of every gunicorn process of
both after each drain, and each process's growth since its first.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from bench.queue import (
    STACK_ENV,
    children,
    drain,
    noop_loops,
    rss_of,
    scratch_database,
    submit_noop_jobs,
)
from devstack.stack import LocalStack, database_url, stop_on_sigterm

THREADS, CAPACITY = 4, 8
SETUPS = {"glibc's default heaps": {}, "MALLOC_ARENA_MAX=2": {"MALLOC_ARENA_MAX": "2"}}


def main(argv: list[str] | None = None) -> None:
    """Take the drains in turns and print every process's resident set after each."""
    parser = argparse.ArgumentParser(prog="python -m bench.coordinator_memory")
    parser.add_argument("--drains", type=int, default=16)
    parser.add_argument("--tasks", type=int, default=8000)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args(argv)
    stop_on_sigterm()
    run_dir = Path(tempfile.mkdtemp(prefix="chunkwise-bench-memory-"))
    server = database_url(run_dir)
    stacks: dict[str, LocalStack] = {}
    try:
        with scratch_database(server) as first, scratch_database(server) as second:
            for (name, env), url in zip(SETUPS.items(), (first, second), strict=True):
                stacks[name] = LocalStack(
                    database_url=url,
                    run_dir=run_dir / str(len(stacks)),
                    env={**STACK_ENV, **env},
                )
                stacks[name].prepare()
                stacks[name].start_coordinator()
            take_turns(stacks, args)
    finally:
        for stack in stacks.values():
            stack.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


def take_turns(stacks: dict[str, LocalStack], args: argparse.Namespace) -> None:
    """Drain each stack once a turn; print its processes' resident sets (MiB) after each."""
    processes = {name: children(s.processes["coordinator"].pid) for name, s in stacks.items()}
    start: dict[int, int] = {}
    for turn in range(1, args.drains + 1):
        for name, stack in stacks.items():
            submit_noop_jobs(stack, args.tasks)
            done = noop_loops(stack, THREADS, args.seconds, fetch=True, capacity=CAPACITY)
            drain(stack)
            sizes = {pid: rss_of(pid) for pid in processes[name]}
            for pid, size in sizes.items():
                start.setdefault(pid, size)
            shown = ", ".join(
                f"{size / 2**20:.1f} MiB (+{(size - start[pid]) / 2**20:.1f})"
                for pid, size in sizes.items()
            )
            print(f"drain {turn:2d}  {name:22s} {done:6,d} tasks  {shown}", flush=True)


if __name__ == "__main__":
    main()
