"""The chunkwise-worker command line: its flags, and the WorkerConfig they describe."""

from __future__ import annotations

import argparse

from worker_cli.version import installed_version
from worker_cli.worker_config import Fault, WorkerConfig, default_worker_id


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the chunkwise-worker flags; argparse exits 2 on bad ones."""
    parser = argparse.ArgumentParser(
        prog="chunkwise-worker", description="Claim and run Chunkwise chunks."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    parser.add_argument(
        "--coordinator", help="coordinator base URL (default: the --app Worker's, $CHUNKWISE_URL)"
    )
    parser.add_argument(
        "--app",
        metavar="MODULE:ATTR",
        help="run the tasks of this worker_cli.Worker (ATTR defaults to `worker`)",
    )
    parser.add_argument("--worker-id", help="default: <hostname>-<pid>-<6 random hex>")
    parser.add_argument("--capacity", type=int, help="chunks run at once (default 2)")
    parser.add_argument(
        "--workloads",
        nargs="+",
        help="workloads to claim, space or comma separated (default: the --app Worker's "
        "tasks, else csv_stats)",
    )
    parser.add_argument("--burst", action="store_true", help="exit once the queue is empty")
    parser.add_argument("--max-tasks", type=int, help="exit after running this many chunks")
    parser.add_argument(
        "--fault",
        type=_fault_arg,
        help="for tests: crash-after-compute or pause-after-compute=SECONDS",
    )
    parser.add_argument("--grace-seconds", type=float, help="default 30")
    parser.add_argument("--wait-seconds", type=float, help="long-poll time, 0-30 (default 10)")
    parser.add_argument(
        "--log-level", default="INFO", type=str.upper, choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    return parser.parse_args(argv)


def _fault_arg(text: str) -> Fault:
    try:
        return Fault.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def config_from_args(args: argparse.Namespace, defaults: dict | None = None) -> WorkerConfig:
    """Build the worker's config from parsed flags, each flag not given taken from `defaults`
    (an --app Worker's settings) or WorkerConfig's own; raise ValueError if they do not fit."""
    workloads = tuple(w for item in args.workloads or () for w in item.split(",") if w)
    given = {
        "worker_id": args.worker_id,
        "workloads": workloads or None,
        "capacity": args.capacity,
        "wait_seconds": args.wait_seconds,
        "grace_seconds": args.grace_seconds,
    }
    settings = {**(defaults or {}), **{k: v for k, v in given.items() if v is not None}}
    settings["worker_id"] = settings.get("worker_id") or default_worker_id()
    return WorkerConfig(**settings, burst=args.burst, max_tasks=args.max_tasks, fault=args.fault)
