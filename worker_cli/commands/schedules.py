"""chunkwise schedule, schedules, run-schedule, pause-schedule, resume-schedule, unschedule."""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Callable

from worker_cli import tables
from worker_cli.commands.arguments import Command, add_wait, json_file
from worker_cli.commands.invocation import EXIT_OK, Invocation
from worker_cli.commands.jobs import print_or_follow


def put_schedule(cli: Invocation, args: argparse.Namespace) -> int:
    """Create or replace a schedule: the manifest job in --job, submitted on --cron."""
    schedule = cli.call(
        cli.client.put_schedule,
        args.name,
        cron=args.cron,
        timezone=args.timezone,
        job=args.job,
        paused=args.paused,
    )
    return print_schedule(cli, schedule)


def pause_schedule(cli: Invocation, args: argparse.Namespace) -> int:
    """Pause a schedule (an operator: anyone's, with --owner)."""
    return set_paused(cli, args, paused=True)


def resume_schedule(cli: Invocation, args: argparse.Namespace) -> int:
    """Resume a schedule from now (an operator: anyone's, with --owner)."""
    return set_paused(cli, args, paused=False)


def set_paused(cli: Invocation, args: argparse.Namespace, *, paused: bool) -> int:
    """Pause or resume a schedule and say when it runs next."""
    schedule = cli.call(cli.client.pause_schedule, args.name, paused=paused, owner=args.owner)
    return print_schedule(cli, schedule)


def print_schedule(cli: Invocation, schedule: dict) -> int:
    """Print a schedule as JSON, or whether it is paused or when it runs next."""
    if cli.as_json:
        cli.print_json(schedule)
    elif schedule["paused"]:
        cli.print(f"schedule {schedule['name']} is paused")
    else:
        next_run = tables.format_time(schedule["next_run_at"])
        cli.print(f"schedule {schedule['name']} runs next at {next_run} UTC")
    return EXIT_OK


def run_schedule(cli: Invocation, args: argparse.Namespace) -> int:
    """Submit a schedule's job now and print its id; with --wait, follow it to the end."""
    # One key for this command's attempts: a retry after a lost answer finds the same job.
    key = f"cli-run-{uuid.uuid4()}"
    job = cli.call(cli.client.run_schedule, args.name, idempotency_key=key, owner=args.owner)
    return print_or_follow(cli, job, args, show_detail=True)


def list_schedules(cli: Invocation, args: argparse.Namespace) -> int:
    """List your schedules with their next and last runs."""
    listing = cli.call(cli.client.list_schedules)
    cli.print_json(listing) if cli.as_json else cli.print(
        tables.schedule_table(listing["schedules"])
    )
    return EXIT_OK


def delete_schedule(cli: Invocation, args: argparse.Namespace) -> int:
    """Delete a schedule; the jobs it submitted stay."""
    # Not repeated on its own: a delete whose answer was lost would come back as 404.
    cli.call(cli.client.delete_schedule, args.name, owner=args.owner, retry=False)
    if not cli.as_json:
        cli.print(f"schedule {args.name} deleted")
    return EXIT_OK


def add_schedule(command: Command) -> None:
    """chunkwise schedule NAME --cron ... --job FILE, and schedules to list them."""
    sub = command("schedule", put_schedule, "submit a manifest job on a cron schedule")
    sub.add_argument("name", metavar="NAME")
    sub.add_argument("--cron", required=True, help='five fields, e.g. "0 3 * * *", or @daily')
    sub.add_argument(
        "--timezone", default="UTC", metavar="ZONE", help="whose clocks, e.g. Europe/Paris (UTC)"
    )
    sub.add_argument(
        "--job", type=json_file, required=True, metavar="FILE", help="the manifest job (JSON)"
    )
    sub.add_argument("--paused", action="store_true", help="keep it, but run nothing")
    command("schedules", list_schedules, "list your schedules (operators: everyone's)")


def add_schedule_actions(command: Command) -> None:
    """chunkwise run-schedule|pause-schedule|resume-schedule|unschedule NAME [--owner USER]."""

    def schedule_command(name: str, action: Callable, help_text: str) -> argparse.ArgumentParser:
        sub = command(name, action, help_text)
        sub.add_argument("name", metavar="NAME")
        sub.add_argument("--owner", metavar="USER", help="operators: another user's schedule")
        return sub

    sub = schedule_command("run-schedule", run_schedule, "submit a schedule's job now")
    add_wait(sub, "follow the job until it finishes")
    schedule_command("pause-schedule", pause_schedule, "pause a schedule: no runs until resumed")
    schedule_command("resume-schedule", resume_schedule, "resume a schedule from now")
    schedule_command("unschedule", delete_schedule, "delete a schedule (its jobs stay)")
