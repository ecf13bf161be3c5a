"""What a CSV job costs the database and the coordinator: statements and CPU a job.

python -m bench.job_statements [--jobs 5] [--records 1000000]. Runs the report's stack (a
coordinator and two workers of capacity 2 on DATABASE_URL's server, or an embedded one) and
`--jobs` plain-sample jobs one after another, each submitted and watched as the chunkwise command
does, after one job to warm up. Prints each job's wall time, the coordinator's CPU a job and,
where the server preloads pg_stat_statements, the statements a job and the most frequent.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.queue import scratch_database
from bench.report import CHUNKS, SEED, start
from bench.statements import Statement, counted_statements, start_counting_statements
from bench.upload_compare import coordinator_cpu
from devstack.sample_csv import generate_csv
from devstack.stack import LocalStack, database_url, stop_on_sigterm


def main(argv: list[str] | None = None) -> None:
    """Run the jobs and print what they cost."""
    parser = argparse.ArgumentParser(prog="python -m bench.job_statements")
    parser.add_argument("--jobs", type=int, default=5)
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    stop_on_sigterm()
    run_dir = Path(tempfile.mkdtemp(prefix="chunkwise-bench-statements-"))
    path = run_dir / "plain.csv"
    path.write_bytes(generate_csv(args.records, seed=SEED))
    with scratch_database(database_url(run_dir)) as url:
        stack = start(url, run_dir / "stack", {}, {"worker-1": (), "worker-2": ()})
        try:
            run_job(stack, path)
            counting = start_counting_statements(url)
            before = coordinator_cpu(stack)
            walls = [run_job(stack, path) for _ in range(args.jobs)]
            cpu = coordinator_cpu(stack) - before
            statements = counted_statements(url) if counting else []
        finally:
            stack.stop()
    shutil.rmtree(run_dir, ignore_errors=True)
    print(f"{args.jobs} plain jobs of {args.records:,} records, {CHUNKS} chunks")
    print(f"wall seconds a job: {', '.join(f'{w:.2f}' for w in walls)}")
    print(f"coordinator CPU a job: {1000 * cpu / args.jobs:.0f} ms")
    if counting:
        print_calls(statements, args.jobs)
    else:
        print("statements: not counted (the server does not preload pg_stat_statements)")


def run_job(stack: LocalStack, path: Path) -> float:
    """Submit the file and watch the job to its end; the wall seconds it took."""
    client = stack.client()
    started = time.monotonic()
    with path.open("rb") as f:
        job = stack.follow_job(client, client.submit_csv_job(f, column="value", chunks=CHUNKS))
    wall = time.monotonic() - started
    client.close()
    if job["status"] != "succeeded":
        raise SystemExit(f"a job ended {job['status']}: {job.get('error')}")
    return wall


def print_calls(statements: Sequence[Statement], jobs: int) -> None:
    """The statements a job, then the most frequent, with their calls a job."""
    counted = [s for s in statements if "pg_stat_statements" not in s.text]
    print(f"statements a job: {sum(s.calls for s in counted) / jobs:.1f}")
    print("  calls a job  exec ms/call  statement")
    for s in sorted(counted, key=lambda s: -s.calls)[:12]:
        print(f"  {s.calls / jobs:11.1f}  {s.executing / max(s.calls, 1):12.3f}  {s.text[:70]}")


if __name__ == "__main__":
    main()
