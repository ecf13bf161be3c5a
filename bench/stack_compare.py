"""A CSV job on the report's stack under two or more environments, the stacks in turns.

python -m bench.stack_compare [--sample plain|export] [--turns 4] [--jobs 6] NAME=JSON ...
Each NAME=JSON is an environment every process of the stack gets on top of the report's, for
example 'shipped={}' against 'two={"POLARS_MAX_THREADS": "2"}'. In each turn a fresh stack (a
coordinator and 2 workers of capacity 2, over one scratch database on DATABASE_URL's server or
an embedded one) is started for each setting in turn, the settings' order alternating from
turn to turn; it runs a job to warm up, then --jobs jobs one after another, submitted and
followed as bench.report does, and stops before the next starts. Every job's wall, POST to
`succeeded`, is printed, then each setting's median and range.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench.job_statements import run_job
from bench.queue import scratch_database
from bench.report import RECORDS, RUN_DIR, SAMPLES, SEED, start
from bench.turns import spread
from devstack.stack import database_url, stop_on_sigterm


def setting(text: str) -> tuple[str, dict[str, str]]:
    """NAME=JSON as (name, environment); argparse's error where it is not one."""
    name, _, env = text.partition("=")
    try:
        parsed = json.loads(env)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: not NAME={{JSON object}} ({exc})") from exc
    if not name or not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"{text!r}: not NAME={{JSON object}}")
    return name, {str(key): str(value) for key, value in parsed.items()}


def main(argv: list[str] | None = None) -> int:
    """Run every setting's stack in turns and print every job's wall seconds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settings", nargs="+", type=setting, metavar="NAME=JSON")
    parser.add_argument("--sample", choices=sorted(SAMPLES), default="plain")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=6)
    args = parser.parse_args(argv)
    settings = dict(args.settings)
    if len(settings) < 2:
        parser.error("give at least two settings with different names")
    stop_on_sigterm()
    walls: dict[str, list[float]] = {name: [] for name in settings}
    with (
        tempfile.TemporaryDirectory(prefix="chunkwise-stack-compare-") as tmp,
        scratch_database(database_url(RUN_DIR)) as url,
    ):
        csv_path = Path(tmp) / f"{args.sample}.csv"
        csv_path.write_bytes(SAMPLES[args.sample](RECORDS, seed=SEED))
        for turn in range(args.turns):
            for name in list(settings)[:: 1 if turn % 2 == 0 else -1]:
                # New worker ids each start: the last stack's are bound to its own credential.
                workers = {f"{name}-{turn}-{slot}": () for slot in (1, 2)}
                stack = start(url, RUN_DIR, settings[name], workers)
                try:
                    run_job(stack, csv_path)
                    jobs = [run_job(stack, csv_path) for _ in range(args.jobs)]
                finally:
                    stack.stop()
                walls[name] += jobs
                print(f"turn {turn + 1} {name}: {' '.join(f'{w:.3f}' for w in jobs)} s", flush=True)
    for name, seconds in walls.items():
        print(f"{name}: {spread(seconds, ' s', 3)} a job, {len(seconds)} jobs ({args.sample})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
