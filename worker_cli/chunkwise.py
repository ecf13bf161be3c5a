"""The chunkwise command: submit CSV jobs, watch them, and inspect the queue as an operator."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable
from typing import TextIO

from worker_cli.client import CoordinatorClient, CoordinatorError, settings_problem
from worker_cli.commands import chunks, events, jobs, queue, schedules
from worker_cli.commands.arguments import shared_options
from worker_cli.commands.invocation import (
    EXIT_HTTP_ERROR,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    Invocation,
    describe_error,
    exit_status_for,
)
from worker_cli.version import installed_version


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    shared = shared_options()
    parser = argparse.ArgumentParser(
        prog="chunkwise", parents=[shared], description="Submit and inspect Chunkwise jobs."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {installed_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, action: Callable, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[shared], help=help_text, description=help_text)
        sub.set_defaults(action=action)
        return sub

    # In the order `chunkwise --help` lists them.
    for add_commands in (
        jobs.add_submit,
        jobs.add_enqueue,
        jobs.add_status,
        jobs.add_jobs,
        jobs.add_cancel_jobs,
        chunks.add_chunks,
        chunks.add_chunk,
        jobs.add_job_actions,
        events.add_events,
        schedules.add_schedule,
        schedules.add_schedule_actions,
        queue.add_operator_views,
        queue.add_workloads,
        queue.add_workload_pauses,
    ):
        add_commands(command)
    return parser


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    """Parse the arguments; bad usage exits as argparse's own errors do."""
    args = build_parser().parse_args(argv)
    # Without a filter every unfinished job of the caller (an operator: anyone's) would match.
    if args.command == "cancel-jobs" and not jobs.job_filters(args):
        flags = ", ".join("--" + name.replace("_", "-") for name in jobs.JOB_FILTERS)
        args.usage_error(f"give at least one filter: {flags}")
    return args


def run(
    argv: list[str] | None,
    *,
    client_factory: Callable = CoordinatorClient,
    out: TextIO | None = None,
    err: TextIO | None = None,
    environ: dict | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Parse the arguments, run one command and return its exit status."""
    out, err = out or sys.stdout, err or sys.stderr
    environ = os.environ if environ is None else environ
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            args = parse_arguments(argv)
    except SystemExit as exc:  # argparse: 2 for bad usage, 0 for --help
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    url = getattr(args, "url", None) or environ.get("CHUNKWISE_URL")
    token = getattr(args, "token", None) or environ.get("CHUNKWISE_TOKEN")
    missing = [
        option
        for option, value in (
            ("--url or CHUNKWISE_URL", url),
            ("--token or CHUNKWISE_TOKEN", token),
        )
        if not value
    ]
    if missing:
        print(f"chunkwise: give {' and '.join(missing)}", file=err)
        return EXIT_USAGE
    if problem := settings_problem(url, token):
        print(f"chunkwise: {problem}", file=err)
        return EXIT_USAGE
    if args.command == "submit" and not os.path.isfile(args.file):
        print(f"chunkwise: {args.file}: no such file", file=err)
        return EXIT_USAGE
    client = client_factory(url, token)
    cli = Invocation(client, out, err, as_json=getattr(args, "json", False), sleep=sleep)
    try:
        return args.action(cli, args)
    except CoordinatorError as exc:
        print(describe_error(exc, url, cli.trace_id), file=err)
        return exit_status_for(exc)
    except (KeyError, TypeError) as exc:  # a 2xx answer without what the API documents
        print(f"chunkwise: the coordinator's answer is not the documented one ({exc!r})", file=err)
        return EXIT_HTTP_ERROR
    except (argparse.ArgumentTypeError, OSError) as exc:  # OSError: the file will not open
        print(f"chunkwise: {exc}", file=err)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("chunkwise: interrupted", file=err)
        return EXIT_INTERRUPTED
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    """Run the chunkwise command; return its exit status."""
    return run(argv)
