"""`make demo`: the real stack on a sample job; `make run`: the same stack, left running."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from devstack import sdk_demo
from devstack.sample_csv import generate_csv
from devstack.stack import (
    REPO,
    BindRefused,
    LocalStack,
    StackStopped,
    database_url,
    kept_tokens,
    run_address,
    stop_on_sigterm,
)
from services import csvstats

RUN_DIR = REPO / ".run"


def start_stack(run_dir: Path, address: tuple[str, int] | None = None) -> LocalStack:
    """Database, migrations, tokens, gunicorn (on address, else a free port) and two workers."""
    url = database_url(run_dir)
    where = {"host": address[0], "port": address[1]} if address else {}
    stack = LocalStack(
        database_url=url, run_dir=run_dir, tokens=kept_tokens(run_dir / "secrets"), **where
    )
    say(f"database:  {url}")
    say(f"logs:      {stack.logs}/  (JSON lines, one file per process)")
    say(f"archive:   {run_dir / 'archive'}")
    stack.prepare()
    stack.start_coordinator()
    say(f"coordinator: {stack.url}  (gunicorn, {stack.logs / 'coordinator.log'})")
    # Early: the other gunicorn worker serves it once its listener reloads the workloads.
    sdk_demo.serve_workload(stack)
    say(f"workloads: csv_stats, and {sdk_demo.WORKLOAD} added at run time (devstack/sdk_demo.py)")
    for name in ("worker-1", "worker-2"):
        stack.start_worker(name)
    say("workers:   worker-1, worker-2 (capacity 2 each)")
    return stack


def say_dashboard(stack: LocalStack) -> None:
    """Where the dashboard is and the token to sign in to it with."""
    say(f"dashboard: {stack.url}/ui/  (sign in with the user token; make run keeps it up)")
    say(f"  user token:     {stack.tokens.user}")
    say(f"  operator token: {stack.tokens.operator}  (adds the queue and workers pages)")


def run_sample(stack: LocalStack, records: int, chunks: int) -> int:
    """Submit a generated CSV, show progress, print the result beside a sequential count."""
    data = generate_csv(records, seed=7)
    sample = stack.run_dir / "sample.csv"
    sample.write_bytes(data)
    say(
        f"sample:    {sample} ({records:,} records, {len(data) / 1e6:.1f} MB, quoted multiline "
        "fields, empty values, negatives)"
    )
    client = stack.client()
    started = time.monotonic()
    with sample.open("rb") as f:
        job = client.submit_csv_job(f, column="value", chunks=chunks)
    say(f"job:       {job['id']} (trace {job['trace_id']}), {job['chunks_total']} chunks")
    job = stack.follow_job(client, job, lambda job: show_progress(job, time.monotonic() - started))
    elapsed = time.monotonic() - started
    client.close()
    print()
    control = csvstats.sequential_totals(data, "value")
    say(f"status:    {job['status']} in {elapsed:.2f} s from upload to merged result")
    if job["status"] != "succeeded":
        say(f"error:     {job['error']}")
        return 1
    result = job["result"]
    say(f"{'':10} {'chunked job':>22} {'sequential control':>22}")
    for key in ("count", "sum", "min", "max"):
        mark = "ok" if result[key] == getattr(control, key) else "MISMATCH"
        say(f"{key:>10} {result[key]!s:>22} {getattr(control, key)!s:>22}  {mark}")
    return 0 if result == control.to_dict() else 1


def show_progress(job: dict, elapsed: float) -> None:
    """One self-overwriting progress line."""
    done, total = job["chunks_completed"], job["chunks_total"]
    width = 30
    filled = int(width * job["progress"])
    sys.stdout.write(
        f"\r  [{'#' * filled}{'.' * (width - filled)}] {done}/{total} chunks "
        f"{job['status']:<9} {elapsed:5.1f} s"
    )
    sys.stdout.flush()


def export_block(stack: LocalStack) -> str:
    """The shell lines that point chunkwise and chunkwise-worker at this stack."""
    return (
        f"export CHUNKWISE_URL={stack.url} \\\n"
        f"       CHUNKWISE_TOKEN={stack.tokens.user} \\\n"
        f"       CHUNKWISE_WORKER_TOKEN={stack.tokens.worker}"
    )


def say_ready(stack: LocalStack) -> None:
    """make run's greeting: the export block, the dashboard and the other tokens."""
    say("\nready. In another shell:\n")
    say(export_block(stack))
    say("\n  then, e.g.:     chunkwise submit data.csv --column value --wait")
    say(f"  dashboard:      {stack.url}/ui/  (sign in with CHUNKWISE_TOKEN)")
    say(f"  operator token: {stack.tokens.operator}  (adds the queue and workers pages)")
    say(f"  metrics token:  {stack.tokens.metrics}  (GET /metrics, as a bearer token)")
    say(f"  (kept in {RUN_DIR / 'secrets' / 'tokens.json'}: the next make run reuses them)")
    say("Ctrl-C stops everything.")


def say(line: str) -> None:
    """Print a line of the demo's log."""
    print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run the demo, or leave the stack running."""
    parser = argparse.ArgumentParser(prog="python -m devstack.demo")
    parser.add_argument("command", choices=["demo", "run"])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--chunks", type=int, default=8)
    args = parser.parse_args(argv)
    # make run listens where the docs say (or CHUNKWISE_BIND); the demo, on any free port.
    address = None
    if args.command == "run":
        try:
            address = run_address(os.environ.get("CHUNKWISE_BIND"))
        except BindRefused as exc:
            print(f"make run: {exc}", file=sys.stderr)
            return 1
    # Ctrl-C and SIGTERM both end in the finally below, which stops every process we started.
    stop_on_sigterm()
    stack = None
    try:
        stack = start_stack(RUN_DIR, address)
        if args.command == "demo":
            say_dashboard(stack)
            status = run_sample(stack, args.records, args.chunks)
            return sdk_demo.run(stack) or status
        say_ready(stack)
        signal.pause()
        return 0
    except StackStopped as exc:
        print(f"\nmake {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        say("\ninterrupted")
        return 130
    finally:
        if stack is not None:
            # A second Ctrl-C or SIGTERM must not cut the clean-up short and leave processes behind.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            stack.stop()
            say("stopped the coordinator and the workers")


if __name__ == "__main__":
    sys.exit(main())
