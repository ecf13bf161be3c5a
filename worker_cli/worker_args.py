"""The chunkwise-worker command line: its flags, and the WorkerConfig they describe."""

from __future__ import annotations

import argparse
import os

from worker_cli.version import installed_version
from worker_cli.worker_config import Fault, WorkerConfig, default_worker_id


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the chunkwise-worker flags; argparse exits 2 on bad ones."""
    parser = argparse.ArgumentParser(
        prog="chunkwise-worker", description="Claim and run Chunkwise chunks."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    parser.add_argument(
        "--coordinator",
        default=os.environ.get("CHUNKWISE_URL"),
        help="coordinator base URL (default: $CHUNKWISE_URL)",
    )
    parser.add_argument("--worker-id", help="default: <hostname>-<pid>-<6 random hex>")
    parser.add_argument("--capacity", type=int, default=2, help="chunks run at once")
    parser.add_argument(
        "--workloads",
        nargs="+",
        default=["csv_stats"],
        help="workloads to claim (space or comma separated)",
    )
    parser.add_argument("--burst", action="store_true", help="exit once the queue is empty")
    parser.add_argument("--max-tasks", type=int, help="exit after running this many chunks")
    parser.add_argument(
        "--fault",
        type=_fault_arg,
        help="for tests: crash-after-compute or pause-after-compute=SECONDS",
    )
    parser.add_argument("--grace-seconds", type=float, default=30.0)
    parser.add_argument("--wait-seconds", type=float, default=10.0, help="long-poll time, 0-30")
    parser.add_argument(
        "--log-level", default="INFO", type=str.upper, choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    return parser.parse_args(argv)


def _fault_arg(text: str) -> Fault:
    try:
        return Fault.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def config_from_args(args: argparse.Namespace) -> WorkerConfig:
    """Build the worker's config from parsed flags; raise ValueError if they do not fit."""
    workloads = tuple(w for item in args.workloads for w in item.split(",") if w)
    return WorkerConfig(
        worker_id=args.worker_id or default_worker_id(),
        workloads=workloads,
        capacity=args.capacity,
        wait_seconds=args.wait_seconds,
        burst=args.burst,
        max_tasks=args.max_tasks,
        grace_seconds=args.grace_seconds,
        fault=args.fault,
    )
