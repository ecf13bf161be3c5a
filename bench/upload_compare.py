"""The POST of a CSV job (to 201) on this tree's coordinator and another tree's, in turns.

python -m bench.upload_compare --base /path/to/other/worktree [--records 1000000] [--turns 5].
Starts a coordinator (no workers) from each tree, each over its own embedded database, and in
every turn times a plain csv.reader pass of the sample, then the POST of the same file to each
coordinator, as a text/csv body and as a multipart form (the trees' order alternates from turn
to turn; each job is cancelled once admitted, so the queue's bound is never met). Prints every
turn's POST / plain-pass ratio and the coordinator's CPU seconds for the POST (its gunicorn
processes' user + system time: on a shared machine it moves far less than the wall time), then
the median and range of each.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from bench.csv_core import SAMPLES
from bench.turns import ratios, spread
from bench.yardsticks import plain_pass
from devstack import stack as devstack
from devstack.stack import REPO, LocalStack, database_url, stop_on_sigterm

RUN_DIR = REPO / ".run" / "upload-compare"
SEED = 20261202
PATHS = {"text/csv body": False, "multipart form": True}


def start_tree(name: str, tree: Path) -> LocalStack:
    """A coordinator whose code is the tree's (its gunicorn config, its app)."""
    run_dir = RUN_DIR / name
    stack = LocalStack(database_url(run_dir), run_dir / "stack", env={"PYTHONPATH": str(tree)})
    # The stack spawns its processes in devstack.stack.REPO: the other tree's, for a moment.
    devstack.REPO = tree
    try:
        stack.prepare()
        stack.start_coordinator()
    except BaseException:
        stack.stop()
        raise
    finally:
        devstack.REPO = REPO
    return stack


def coordinator_cpu(stack: LocalStack) -> float:
    """User + system CPU seconds of the coordinator's gunicorn processes so far."""
    import psutil

    root = psutil.Process(stack.processes["coordinator"].pid)
    return sum(sum(p.cpu_times()[:2]) for p in [root, *root.children(recursive=True)])


def post_seconds(stack: LocalStack, path: Path, form: bool) -> tuple[float, float]:
    """Wall seconds of one submission until its 201, and the coordinator's CPU seconds for
    it; the job is cancelled after."""
    client = stack.client()
    try:
        cpu = coordinator_cpu(stack)
        started = time.perf_counter()
        with path.open("rb") as f:
            job = client.submit_csv_job(f, column="value", chunks=8, form=form)
        seconds = time.perf_counter() - started
        cpu = coordinator_cpu(stack) - cpu
        client.cancel_job(job["id"])
    finally:
        client.close()
    return seconds, cpu


def main(argv: list[str] | None = None) -> None:
    """Start both coordinators, take the turns on each sample, print every one."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base", type=Path, required=True, help="the other tree (the old side)")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--samples", nargs="+", default=["export", "plain"], choices=SAMPLES)
    args = parser.parse_args(argv)
    stop_on_sigterm()
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    trees = {"old": args.base.resolve(), "new": REPO}
    stacks: dict[str, LocalStack] = {}
    try:
        for name, tree in trees.items():
            stacks[name] = start_tree(name, tree)
        for sample in args.samples:
            path = RUN_DIR / f"{sample}.csv"
            path.write_bytes(SAMPLES[sample](args.records, seed=SEED))
            data = path.read_bytes()
            for stack in stacks.values():  # warm: every code path imported
                for form in PATHS.values():
                    post_seconds(stack, path, form)
            plain: list[float] = []
            posts: dict[tuple[str, str], list[float]] = {}
            cpus: dict[tuple[str, str], list[float]] = {}
            print(f"\n{sample} sample, {len(data) / 2**20:.1f} MiB; load {os.getloadavg()}")
            for turn in range(args.turns):
                started = time.perf_counter()
                plain_pass(data, "value")
                plain.append(time.perf_counter() - started)
                order = list(stacks) if turn % 2 == 0 else list(reversed(stacks))
                for name in order:
                    for label, form in PATHS.items():
                        seconds, cpu = post_seconds(stacks[name], path, form)
                        posts.setdefault((name, label), []).append(seconds)
                        cpus.setdefault((name, label), []).append(cpu)
                shown = "  ".join(
                    f"{name} {label} {times[-1]:.3f} s ({times[-1] / plain[-1]:.3f}x,"
                    f" cpu {cpus[name, label][-1]:.2f} s)"
                    for (name, label), times in posts.items()
                )
                print(f"turn {turn + 1}: plain pass {plain[-1]:.3f} s  {shown}")
            print(f"plain pass {spread(plain, ' s', 3)}; load {os.getloadavg()}")
            for (name, label), times in posts.items():
                print(
                    f"{name} {label}: POST {spread(times, ' s', 3)}, "
                    f"/ plain pass {spread(ratios(times, plain), 'x', 3)}, "
                    f"coordinator cpu {spread(cpus[name, label], ' s', 2)}"
                )
    finally:
        for stack in stacks.values():
            stack.stop()


if __name__ == "__main__":
    main()
