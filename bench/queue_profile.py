"""Where a no-op task's time goes: py-spy on the coordinator and on the client during a drain.

python -m bench.queue_profile [--threads 4] [--seconds 15] [--capacity 100] [--fetch] [--out DIR]

Starts a coordinator (make bench-queue's settings) on DATABASE_URL's server, or an embedded
one, queues no-op tasks, and while `--threads` claim-and-batch-complete loops drain them
records every gunicorn worker and this process with py-spy (the dev extra), sampling only
threads that hold the GIL: the Python work, not the waits. Writes each recording's collapsed
stacks into --out, then prints each layer's share of the coordinator's and of the client's
samples, and the frames with the most samples of their own. Where the server preloads
pg_stat_statements (a DATABASE_URL server started with shared_preload_libraries naming it),
it also prints the database's side of the drain, statement by statement.
docs/performance/profile.md reads these figures.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.queue import (
    CLAIM_CAPACITY,
    STACK_ENV,
    children,
    drain,
    noop_loops,
    scratch_database,
    submit_noop_jobs,
)
from bench.statements import Statement, counted_statements, start_counting_statements
from devstack.stack import BIN, LocalStack, database_url, stop_on_sigterm

# A sample's layer: the first of these (in order) any of its frames matches, else "other".
LAYERS = (
    ("psycopg: adapting, sending, reading rows", ("psycopg/", "psycopg_pool/")),
    ("marshmallow: loading requests, dumping answers", ("marshmallow/",)),
    ("the service and repository code", ("services/", "repositories/")),
    ("authentication", ("app/auth.py", "services/auth.py")),
    ("Flask and its hooks (metrics, tracing, errors)", ("flask/", "prometheus_flask_exporter")),
    ("Werkzeug: the request and the response", ("werkzeug/",)),
    ("gunicorn: sockets, HTTP parsing, the poller", ("gunicorn/", "gunicorn.conf.py")),
    ("requests and urllib3 (the client)", ("requests/", "urllib3/", "http/client.py")),
)


def main(argv: list[str] | None = None) -> None:
    """Drain under py-spy, then print each layer's share."""
    parser = argparse.ArgumentParser(prog="python -m bench.queue_profile")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--capacity", type=int, default=CLAIM_CAPACITY, help="tasks a loop holds")
    parser.add_argument(
        "--fetch", action="store_true", help="each batch of results claims the next (?claim=N)"
    )
    parser.add_argument(
        "--out", type=Path, default=Path(tempfile.gettempdir()) / "chunkwise-profile"
    )
    args = parser.parse_args(argv)
    stop_on_sigterm()
    args.out.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="chunkwise-bench-profile-"))
    with scratch_database(database_url(run_dir)) as url:
        stack = LocalStack(database_url=url, run_dir=run_dir / "stack", env=STACK_ENV)
        try:
            stack.prepare()
            stack.start_coordinator()
            submit_noop_jobs(stack, 40_000)
            targets = {
                f"coordinator-{pid}": pid for pid in children(stack.processes["coordinator"].pid)
            }
            targets["client"] = os.getpid()
            counting = start_counting_statements(url)
            spies = [spy(pid, args.out / name, args.seconds) for name, pid in targets.items()]
            started = time.monotonic()
            done = noop_loops(stack, args.threads, args.seconds, args.fetch, args.capacity)
            elapsed = time.monotonic() - started
            statements = counted_statements(url) if counting else []
            for process in spies:
                process.wait(timeout=120)
            drain(stack)
        finally:
            stack.stop()
    shutil.rmtree(run_dir, ignore_errors=True)
    print(
        f"{done} no-op tasks in {elapsed:.1f} s ({done / elapsed:.0f}/s), "
        f"{args.threads} threads x capacity {args.capacity}{', fetching' if args.fetch else ''}"
    )
    coordinator = [args.out / f"{n}.txt" for n in targets if n.startswith("coordinator")]
    print_layers("coordinator (every gunicorn worker)", coordinator)
    print_layers("client (the benchmark's loops)", [args.out / "client.txt"])
    if counting:
        print_statements(statements, done)
    else:
        print("\nthe database's side: not counted (the server does not preload pg_stat_statements)")


def print_statements(statements: list[Statement], tasks: int) -> None:
    """Each statement's milliseconds a call and its share of a task, in the order given."""
    print(f"\nthe database's side during the drain (pg_stat_statements, {tasks} tasks)")
    print("executing includes the time a statement waited for locks")
    print("   calls  exec ms/call  plan ms/call  exec+plan us/task  statement")
    for s in statements[:12]:
        per_task = 1000 * (s.executing + s.planning) / max(tasks, 1)
        print(
            f"  {s.calls:6d}  {s.executing / max(s.calls, 1):12.3f}"
            f"  {s.planning / max(s.calls, 1):12.3f}  {per_task:17.1f}  {s.text[:70]}"
        )


def spy(pid: int, stem: Path, seconds: float) -> subprocess.Popen:
    """py-spy recording `pid`'s GIL-holding threads for `seconds`, as collapsed stacks."""
    return subprocess.Popen(
        [
            str(BIN / "py-spy"),
            *("record", "--pid", str(pid), "--duration", str(round(seconds))),
            *("--rate", "250", "--gil", "--format", "raw"),
            *("--output", f"{stem}.txt"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def print_layers(title: str, files: list[Path]) -> None:
    """Each layer's share of the samples, and the frames with the most samples of their own."""
    layers: collections.Counter[str] = collections.Counter()
    tops: collections.Counter[str] = collections.Counter()
    for file in files:
        for line in file.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            frames = stack.split(";")
            layers[layer_of(frames)] += int(count)
            tops[frames[-1]] += int(count)
    busy = sum(layers.values()) or 1
    print(f"\n{title}: {busy} samples holding the GIL")
    for name, count in layers.most_common():
        print(f"  {100 * count / busy:5.1f}%  {name}")
    print("  hottest frames (self):")
    for frame, count in tops.most_common(12):
        print(f"  {100 * count / busy:5.1f}%  {frame}")


def layer_of(frames: list[str]) -> str:
    """The layer a sample's innermost recognisable frame belongs to."""
    for frame in reversed(frames):
        for name, marks in LAYERS:
            if any(mark in frame for mark in marks):
                return name
    return "other"


if __name__ == "__main__":
    main()
