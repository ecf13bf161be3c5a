"""chunkwise queue, workers, workloads, pause-workload and resume-workload: operators' views."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime

from worker_cli import tables
from worker_cli.commands.arguments import Command, shared_options
from worker_cli.commands.invocation import EXIT_OK, EXIT_USAGE, Invocation

# The caps `workloads add` and `workloads change` take, with the type each is given in.
WORKLOAD_CAPS = {
    "max_queued_tasks": int,
    "max_tasks_per_job": int,
    "max_leases_per_worker": int,
    "max_leases_total": int,
    "max_starts_per_second": float,
    "max_queued_tasks_per_user": int,
    "max_stored_bytes_per_user": int,
}


def queue(cli: Invocation, args: argparse.Namespace) -> int:
    """Show the queue: chunks by state and workload, oldest pending chunk, leases vs caps."""
    view = cli.call(cli.client.queue_status)
    cli.print_json(view) if cli.as_json else cli.print(tables.queue_view(view))
    return EXIT_OK


def workers(cli: Invocation, args: argparse.Namespace) -> int:
    """Show each worker's last heartbeat, leases held, chunks done and peak memory."""
    listing = cli.call(cli.client.list_workers)
    if cli.as_json:
        cli.print_json(listing)
    else:
        cli.print(tables.worker_table(listing["workers"], datetime.now(UTC)))
    return EXIT_OK


def list_workloads(cli: Invocation, args: argparse.Namespace) -> int:
    """Show each served workload: running or paused (by whom, since when), and its caps."""
    listing = cli.call(cli.client.list_workloads)
    if cli.as_json:
        cli.print_json(listing)
    else:
        cli.print(tables.workload_table(listing["workloads"]))
    return EXIT_OK


def pause_workload(cli: Invocation, args: argparse.Namespace) -> int:
    """Pause a workload: claims lease none of its tasks until it is resumed."""
    return set_workload_paused(cli, args, paused=True)


def resume_workload(cli: Invocation, args: argparse.Namespace) -> int:
    """Resume a workload: claims lease its tasks again."""
    return set_workload_paused(cli, args, paused=False)


def set_workload_paused(cli: Invocation, args: argparse.Namespace, *, paused: bool) -> int:
    """Pause or resume a workload and say which it now is."""
    # Retried like a read: pausing a paused workload, or resuming a running one, changes nothing.
    workload = cli.call(cli.client.pause_workload, args.workload, paused=paused)
    if cli.as_json:
        cli.print_json(workload)
    elif workload["paused"]:
        cli.print(f"workload {workload['workload']} is paused ({tables.pause_note(workload)})")
    else:
        cli.print(f"workload {workload['workload']} is running")
    return EXIT_OK


def show_workload(cli: Invocation, args: argparse.Namespace) -> int:
    """Show one served workload: running or paused, and its caps."""
    return print_workload(cli, cli.call(cli.client.get_workload, args.workload))


def add_workload(cli: Invocation, args: argparse.Namespace) -> int:
    """Serve a new workload on every coordinator: the caps given, the settings' for the rest."""
    # Not retried: a retry after a lost answer would be told the name is taken.
    added = cli.call(cli.client.add_workload, args.workload, workload_caps(args), retry=False)
    return print_workload(cli, added)


def change_workload(cli: Invocation, args: argparse.Namespace) -> int:
    """Change some of a workload's caps on every coordinator; the others stay."""
    caps = workload_caps(args)
    if not caps:
        cli.warn("chunkwise: give at least one cap to change, e.g. --max-queued-tasks 1000")
        return EXIT_USAGE
    # Retried: the same caps set twice are the same caps.
    return print_workload(cli, cli.call(cli.client.change_workload, args.workload, caps))


def remove_workload(cli: Invocation, args: argparse.Namespace) -> int:
    """Stop serving a workload on every coordinator (refused while it has unfinished jobs)."""
    cli.call(cli.client.remove_workload, args.workload, retry=False)
    if cli.as_json:
        cli.print_json({"workload": args.workload, "removed": True})
    else:
        cli.print(f"workload {args.workload} removed")
    return EXIT_OK


def print_workload(cli: Invocation, workload: dict) -> int:
    """Print one workload as JSON or as a one-line table."""
    cli.print_json(workload) if cli.as_json else cli.print(tables.workload_table([workload]))
    return EXIT_OK


def workload_caps(args: argparse.Namespace) -> dict:
    """The caps given on the command line, by the API's names (None: lift that cap)."""
    return {name: getattr(args, name) for name in WORKLOAD_CAPS if hasattr(args, name)}


def cap_value(kind: type) -> Callable[[str], int | float | None]:
    """An argument type: a number of that kind, or `none` to lift the cap."""

    def parse(text: str) -> int | float | None:
        if text.strip().lower() == "none":
            return None
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__} or none") from None

    return parse


def add_operator_views(command: Command) -> None:
    """chunkwise queue and chunkwise workers."""
    command("queue", queue, "operators: the queue at a glance")
    command("workers", workers, "operators: every worker the coordinator has seen")


def add_workloads(command: Command) -> None:
    """chunkwise workloads [list | show | add | change | remove]: operators' workloads."""
    help_text = "operators: list, show, add, change or remove the workloads served"
    # `chunkwise workloads` alone lists them.
    parser = command("workloads", list_workloads, help_text)
    actions = parser.add_subparsers(dest="workloads_command", metavar="ACTION")
    shared = shared_options()

    def action(name: str, run: Callable, text: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, parents=[shared], help=text, description=text)
        sub.set_defaults(action=run)
        return sub

    action("list", list_workloads, "every workload served, its caps and pause")
    action("show", show_workload, "one workload").add_argument("workload", metavar="NAME")
    for name, run, text in (
        ("add", add_workload, "serve a new workload (caps not given: the coordinator's settings)"),
        ("change", change_workload, "change some of a workload's caps (none lifts one)"),
    ):
        sub = action(name, run, text)
        sub.add_argument("workload", metavar="NAME")
        for cap, kind in WORKLOAD_CAPS.items():
            sub.add_argument(
                "--" + cap.replace("_", "-"),
                dest=cap,
                type=cap_value(kind),
                default=argparse.SUPPRESS,
                metavar="N",
            )
    text = "stop serving a workload (refused while it has unfinished jobs)"
    action("remove", remove_workload, text).add_argument("workload", metavar="NAME")


def add_workload_pauses(command: Command) -> None:
    """chunkwise pause-workload|resume-workload NAME."""
    for name, action, help_text in (
        ("pause-workload", pause_workload, "operators: stop claims leasing a workload's tasks"),
        ("resume-workload", resume_workload, "operators: let claims lease a workload's tasks"),
    ):
        command(name, action, help_text).add_argument("workload", metavar="NAME")
