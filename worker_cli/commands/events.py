"""chunkwise events: the outbox's job and chunk events, once or followed."""

from __future__ import annotations

import argparse
import json

from worker_cli import tables
from worker_cli.commands.arguments import Command, uuid_text
from worker_cli.commands.invocation import EXIT_OK, Invocation


def events(cli: Invocation, args: argparse.Namespace) -> int:
    """Print outbox events after --after; with --follow, keep polling for new ones."""
    filters = {"limit": args.limit, "job_id": args.job, "types": args.type}
    if not args.follow:
        page = cli.call(cli.client.list_events, after=args.after, **filters)
        if cli.as_json:
            cli.print_json(page)
        else:
            for event in page["events"]:
                cli.print(tables.event_line(event))
        return EXIT_OK
    after, printed = args.after, 0
    deadline = None if args.timeout is None else cli.clock() + args.timeout
    try:
        while deadline is None or cli.clock() < deadline:
            page = cli.call(cli.client.list_events, after=after, **filters)
            for event in page["events"]:
                # One document per line: a feed that never ends cannot be one JSON array.
                cli.print(json.dumps(event) if cli.as_json else tables.event_line(event))
                printed += 1
                if args.max_events is not None and printed >= args.max_events:
                    return EXIT_OK
            after = page["next_after"]
            if not page["events"]:
                cli.sleep(args.interval)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a follow ends
    return EXIT_OK


def add_events(command: Command) -> None:
    """chunkwise events [--follow]."""
    sub = command("events", events, "print job and chunk events")
    sub.add_argument("--after", type=int, default=0, help="print events after this id")
    sub.add_argument("--limit", type=int, help="events per request, 1-1000")
    sub.add_argument("--job", type=uuid_text, metavar="JOB", help="only this job's events")
    sub.add_argument(
        "--type", action="append", metavar="EVENT", help="only these events, e.g. job.failed"
    )
    sub.add_argument("--follow", action="store_true", help="keep polling until Ctrl-C")
    sub.add_argument("--max-events", type=int, help="with --follow: stop after this many")
    sub.add_argument("--timeout", type=float, help="with --follow: stop after this many seconds")
    sub.add_argument("--interval", type=float, default=1.0, help="seconds between empty polls")
