"""The chunkwise command: submit CSV jobs, watch them, and inspect the queue as an operator."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TextIO

from worker_cli import tables
from worker_cli.client import (
    CoordinatorClient,
    CoordinatorError,
    CoordinatorUnavailable,
    SubmittedJob,
    new_trace_id,
    settings_problem,
)
from worker_cli.version import installed_version

EXIT_OK = 0
EXIT_JOB_UNSUCCESSFUL = 1
EXIT_USAGE = 2
EXIT_HTTP_ERROR = 3
EXIT_UNREACHABLE = 4
EXIT_INTERRUPTED = 130

FINISHED = frozenset({"succeeded", "failed", "cancelled"})
UNSUCCESSFUL = frozenset({"failed", "cancelled"})
JOB_STATUSES = ("queued", "running", "merging", "succeeded", "failed", "cancelled")
UNFINISHED_STATUSES = tuple(status for status in JOB_STATUSES if status not in FINISHED)
# The options `jobs` and `cancel-jobs` filter by, as the API names them.
JOB_FILTERS = ("workload", "label", "owner", "depends_on", "status")
# Waits between attempts of a call that met a 429, a 5xx or no coordinator at all.
RETRY_DELAYS = (0.25, 0.5, 1.0)
MAX_RETRY_AFTER = 5.0
KEY_PREFIX = "cli-sha256-"
HASH_BLOCK_SIZE = 1024 * 1024


@dataclass(frozen=True)
class Invocation:
    """One run of the command: the client, where output goes, the trace id all calls share."""

    client: CoordinatorClient
    out: TextIO
    err: TextIO
    as_json: bool
    trace_id: str = field(default_factory=new_trace_id)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def call(self, method: Callable, *args, retry: bool = True, **kwargs):
        """Call a client method, retrying 429, 5xx and an unreachable coordinator a few times."""
        # A StorageFailed (507, storage_unavailable) is not retried: the disk stays full or
        # unwritable until an operator acts, and each retry would upload the file again.
        delays = RETRY_DELAYS if retry else ()
        for delay in (*delays, None):
            try:
                return method(*args, trace_id=self.trace_id, **kwargs)
            except CoordinatorUnavailable as exc:
                if delay is None:
                    raise
                self.sleep(min(exc.retry_after or delay, MAX_RETRY_AFTER))
        raise AssertionError("unreachable")

    def print(self, text: str) -> None:
        """Write human output to stdout."""
        print(text, file=self.out, flush=True)

    def print_json(self, document: object) -> None:
        """Write one JSON document to stdout."""
        print(json.dumps(document, indent=2), file=self.out, flush=True)

    def warn(self, text: str) -> None:
        """Write a note or an error to stderr."""
        print(text, file=self.err, flush=True)


# -- argument types -------------------------------------------------------------------------


def label_pair(text: str) -> tuple[str, str]:
    """Parse `key=value`."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


def label_filter(text: str) -> str:
    """Check `key=value` and pass it on as the server's filter."""
    label_pair(text)
    return text


def delimiter_char(text: str) -> str:
    """A one-character delimiter; `\\t` and `tab` mean a tab."""
    return "\t" if text in ("\\t", "tab") else text


def uuid_text(text: str) -> str:
    """A UUID, normalised; anything else is a usage error."""
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a UUID: {text!r}") from None


def aware_time(text: str) -> str:
    """An ISO 8601 time with its offset (`Z` for UTC), normalised; anything else is a usage
    error."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give the time's offset (Z for UTC): {text!r}")
    return moment.isoformat()


def json_file(path: str) -> dict:
    """A JSON object read from a file ("-": standard input)."""
    try:
        with contextlib.nullcontext(sys.stdin) if path == "-" else open(path) as file:
            document = json.load(file)
    except (OSError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"cannot read a JSON object from {path}: {exc}") from exc
    if not isinstance(document, dict):
        raise argparse.ArgumentTypeError(f"{path} holds JSON, but not an object")
    return document


def default_idempotency_key(
    file_sha256: str,
    *,
    column: str,
    delimiter: str,
    chunks: int,
    priority: int,
    labels: dict[str, str],
    not_before: str | None = None,
) -> str:
    """A key naming the file's bytes and every parameter, so re-running a submit finds its job."""
    request = {
        "file_sha256": file_sha256,
        "column": column,
        "delimiter": delimiter,
        "chunks": chunks,
        "priority": priority,
        "labels": dict(sorted(labels.items())),
    }
    if not_before is not None:  # absent otherwise, so keys from before it stay the same
        request["not_before"] = not_before
    return key_naming(request)


def key_naming(request: dict) -> str:
    """An Idempotency-Key naming a request by the SHA-256 of its canonical JSON."""
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return KEY_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()


def file_sha256(path: str) -> str:
    """The SHA-256 of a file, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(HASH_BLOCK_SIZE):
            digest.update(block)
    return digest.hexdigest()


# -- commands -------------------------------------------------------------------------------


def submit(cli: Invocation, args: argparse.Namespace) -> int:
    """Upload a CSV as a job and print its id; with --wait, follow it to the end."""
    labels = dict(args.label or [])
    key = chosen_key(args) or default_idempotency_key(
        file_sha256(args.file),
        column=args.column,
        delimiter=args.delimiter,
        chunks=args.chunks,
        priority=args.priority,
        labels=labels,
        not_before=args.not_before,
    )

    def upload(*, trace_id: str) -> dict:
        # Opened per attempt: a retried upload must send the file from its first byte.
        with open(args.file, "rb") as file:
            return cli.client.submit_csv_job(
                file,
                column=args.column,
                delimiter=args.delimiter,
                chunks=args.chunks,
                priority=args.priority,
                labels=labels,
                not_before=args.not_before,
                idempotency_key=key,
                trace_id=trace_id,
            )

    job = cli.call(upload)
    say_if_found(cli, job)
    return print_or_follow(cli, job, args, show_detail=False)


def enqueue(cli: Invocation, args: argparse.Namespace) -> int:
    """Submit a manifest job (its JSON in FILE) and print its id; with --wait, follow it."""
    job = dict(args.job)
    if args.after:
        job["depends_on"] = [*job.get("depends_on", []), *args.after]
    # As submit's: named by what is asked, so re-running the command finds its job.
    key = chosen_key(args) or key_naming(job)
    submitted = cli.call(cli.client.submit_job, job, idempotency_key=key)
    say_if_found(cli, submitted)
    return print_or_follow(cli, submitted, args, show_detail=True)


def chosen_key(args: argparse.Namespace) -> str | None:
    """The key --idempotency-key gives, a fresh one for --new, or None for the derived one."""
    # One key for all of this command's attempts: a retry after a lost answer finds its job.
    return f"cli-new-{uuid.uuid4()}" if args.new else args.idempotency_key


def say_if_found(cli: Invocation, job: dict) -> None:
    """Tell stderr when the coordinator returned an earlier job under the same key."""
    if isinstance(job, SubmittedJob) and not job.created:
        cli.warn(
            f"chunkwise: job {job['id']} was submitted before under the same idempotency key "
            f"(it is {job['status']}): showing it; --new submits again"
        )


def print_or_follow(
    cli: Invocation, job: dict, args: argparse.Namespace, *, show_detail: bool
) -> int:
    """Print a job just submitted (its id, or its JSON); with --wait, follow it to the end."""
    if not args.wait:
        cli.print_json(job) if cli.as_json else cli.print(job["id"])
        return EXIT_OK
    if not cli.as_json:
        cli.print(job["id"])
    return finish_job(cli, wait_for_job(cli, job, args.interval), show_detail=show_detail)


def status(cli: Invocation, args: argparse.Namespace) -> int:
    """Show a job; with --watch, follow it to the end."""
    job = cli.call(cli.client.get_job, args.job)
    if args.watch:
        job = wait_for_job(cli, job, args.interval)
    return finish_job(cli, job, show_detail=True)


def result(cli: Invocation, args: argparse.Namespace) -> int:
    """Print a finished job's result, or its error."""
    job = cli.call(cli.client.get_job, args.job)
    if job["status"] == "succeeded" and job["workload"] != "csv_stats":
        manifests = cli.call(cli.client.list_results, args.job)
        if cli.as_json:
            cli.print_json(manifests)
        else:
            cli.print(tables.manifest_table(manifests["results"]))
        return EXIT_OK
    if job["status"] not in FINISHED:
        if cli.as_json:
            cli.print_json(job)
        cli.warn(
            f"job {job['id']} has no result yet: it is {job['status']} ({job['progress']:.0%})"
        )
        return EXIT_JOB_UNSUCCESSFUL
    return finish_job(cli, job, show_detail=False)


def finish_job(cli: Invocation, job: dict, *, show_detail: bool) -> int:
    """Print a job (its detail, or just its result) and return 1 unless it succeeded."""
    if cli.as_json:
        cli.print_json(job)
    elif show_detail:
        cli.print(tables.job_detail(job))
    elif job["status"] == "succeeded" and job.get("result") is not None:
        cli.print(tables.result_block(job["result"]))
    if job["status"] in UNSUCCESSFUL:
        report_unsuccessful(cli, job)
        return EXIT_JOB_UNSUCCESSFUL
    return EXIT_OK


def report_unsuccessful(cli: Invocation, job: dict) -> None:
    """Tell stderr why a job did not succeed."""
    if job["status"] == "cancelled":
        cli.warn(f"chunkwise: job {job['id']} was cancelled")
        return
    cli.warn(f"chunkwise: job {job['id']} failed: {tables.error_summary(job.get('error'))}")
    if job.get("partial_result"):
        cli.warn(f"  partial result: {json.dumps(job['partial_result'])}")
    cli.warn(f"  trace id: {job.get('trace_id')}")


def wait_for_job(cli: Invocation, job: dict, interval: float) -> dict:
    """Follow a job until it finishes, drawing its progress on stderr."""
    progress = tables.ProgressDisplay(cli.err, clock=cli.clock)
    counts_records = "records" in (job.get("parameters") or {})
    records, records_at = None, None
    version = None
    try:
        while True:
            if counts_records and records_at != job["chunks_completed"]:
                # Only when a chunk completed: the chunk list costs more than the job.
                chunks = cli.call(cli.client.list_chunks, job["id"])["chunks"]
                records, records_at = tables.records_done(chunks), job["chunks_completed"]
            progress.show(job, records)
            if job["status"] in FINISHED:
                return job
            # The coordinator answers as soon as the job changes; `interval` only bounds how
            # long the clock on the progress line may stand still.
            changed, version = cli.call(
                cli.client.watch_job, job["id"], version, wait_seconds=interval
            )
            job = changed or job
    finally:
        progress.finish()


def list_jobs(cli: Invocation, args: argparse.Namespace) -> int:
    """List the caller's jobs, newest first."""
    page = cli.call(
        cli.client.list_jobs,
        status=args.status,
        limit=args.limit,
        label=args.label,
        owner=args.owner,
        workload=args.workload,
        depends_on=args.depends_on,
        cursor=args.cursor,
    )
    if cli.as_json:
        cli.print_json(page)
        return EXIT_OK
    cli.print(tables.job_table(page["jobs"]))
    if page.get("next_cursor"):
        cli.warn(f"more jobs: --cursor {page['next_cursor']}")
    return EXIT_OK


def list_chunks(cli: Invocation, args: argparse.Namespace) -> int:
    """List a job's chunks."""
    chunks = cli.call(cli.client.list_chunks, args.job)
    cli.print_json(chunks) if cli.as_json else cli.print(tables.chunk_table(chunks["chunks"]))
    return EXIT_OK


def show_chunk(cli: Invocation, args: argparse.Namespace) -> int:
    """Show one chunk, named by id or index, with its attempts."""
    chunk_id = args.chunk
    if chunk_id.isdigit():
        index = int(chunk_id)
        page = cli.call(cli.client.chunk_page, args.job, after=index - 1, limit=1)["chunks"]
        if not page or page[0]["index"] != index:
            cli.warn(
                f"chunkwise: not_found: job {args.job} has no chunk {index} "
                f"(trace id {cli.trace_id})"
            )
            return EXIT_HTTP_ERROR
        chunk_id = page[0]["id"]
    else:
        chunk_id = uuid_text(chunk_id)
    chunk = cli.call(cli.client.get_chunk, args.job, chunk_id)
    cli.print_json(chunk) if cli.as_json else cli.print(tables.chunk_detail(chunk))
    return EXIT_OK


def cancel(cli: Invocation, args: argparse.Namespace) -> int:
    """Cancel a job."""
    job = cli.call(cli.client.cancel_job, args.job)
    cli.print_json(job) if cli.as_json else cli.print(f"job {job['id']} is {job['status']}")
    return EXIT_OK


def cancel_jobs(cli: Invocation, args: argparse.Namespace) -> int:
    """Cancel every unfinished job that matches the filters, a batch at a time."""
    cancelled: list[str] = []
    more = True
    while more:
        # Retried like cancel: if an answer is lost, the jobs its batch cancelled no longer match.
        batch = cli.call(cli.client.cancel_jobs, limit=args.limit, **job_filters(args))
        cancelled += batch["cancelled"]
        # A batch that cancelled nothing cannot make progress: stop rather than spin.
        more = batch["more"] and bool(batch["cancelled"])
    if cli.as_json:
        cli.print_json({"cancelled": cancelled, "count": len(cancelled)})
    else:
        cli.print(f"cancelled {len(cancelled)} job{'' if len(cancelled) == 1 else 's'}")
    return EXIT_OK


def job_filters(args: argparse.Namespace) -> dict[str, str]:
    """The job filters given on the command line, by the API's names."""
    given = {name: getattr(args, name) for name in JOB_FILTERS}
    return {name: value for name, value in given.items() if value is not None}


def retry(cli: Invocation, args: argparse.Namespace) -> int:
    """Re-queue a failed job whose failure another attempt may fix."""
    # Not repeated on its own: a retry that went through but whose answer was lost would
    # come back as 409 not_failed.
    job = cli.call(cli.client.retry_job, args.job, retry=False)
    cli.print_json(job) if cli.as_json else cli.print(f"job {job['id']} is {job['status']}")
    return EXIT_OK


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


# -- errors and exit statuses ---------------------------------------------------------------


def exit_status_for(exc: CoordinatorError) -> int:
    """4 when no coordinator answered, 3 for any HTTP error it answered with."""
    if isinstance(exc, CoordinatorUnavailable) and exc.status is None:
        return EXIT_UNREACHABLE
    return EXIT_HTTP_ERROR


def describe_error(exc: CoordinatorError, url: str, trace_id: str) -> str:
    """The error's code, message, HTTP status and trace id, then any field errors."""
    if exc.status is None:
        head = f"chunkwise: coordinator unreachable at {url}: {exc.message}"
    else:
        head = f"chunkwise: {exc.code or 'error'}: {exc.message} (HTTP {exc.status})"
    lines = [f"{head} (trace id {exc.trace_id or trace_id})"]
    fields = exc.details.get("fields")
    for name, problems in fields.items() if isinstance(fields, dict) else ():
        text = "; ".join(map(str, problems)) if isinstance(problems, list) else json.dumps(problems)
        lines.append(f"  {name}: {text}")
    return "\n".join(lines)


# -- parsing and main -----------------------------------------------------------------------


# One function per subcommand (or per family that shares its options), each given `command`:
# (name, action, help) -> the new subcommand's parser, which takes the shared options too.
Command = Callable[[str, Callable, str], argparse.ArgumentParser]


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

    for add_commands in (
        add_submit,
        add_enqueue,
        add_status,
        add_jobs,
        add_cancel_jobs,
        add_chunks,
        add_chunk,
        add_job_actions,
        add_events,
        add_schedule,
        add_schedule_actions,
        add_operator_views,
        add_workloads,
        add_workload_pauses,
    ):
        add_commands(command)
    return parser


def shared_options() -> argparse.ArgumentParser:
    """--url, --token and --json, accepted before or after the subcommand."""
    # SUPPRESS keeps a subcommand's unset copy from overwriting a value given before it.
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument(
        "--url", default=argparse.SUPPRESS, help="coordinator base URL (default: $CHUNKWISE_URL)"
    )
    shared.add_argument(
        "--token", default=argparse.SUPPRESS, help="bearer token (default: $CHUNKWISE_TOKEN)"
    )
    shared.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print the server's JSON on stdout",
    )
    return shared


def add_wait(sub: argparse.ArgumentParser, help_text: str) -> None:
    """--wait, and the hidden --interval that bounds each wait."""
    sub.add_argument("--wait", action="store_true", help=help_text)
    sub.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)


def add_key_choice(sub: argparse.ArgumentParser, derived_from: str) -> None:
    """--idempotency-key, or --new for a fresh one."""
    keys = sub.add_mutually_exclusive_group()
    keys.add_argument("--idempotency-key", help=f"default: derived from {derived_from}")
    keys.add_argument(
        "--new",
        action="store_true",
        help="submit again under a fresh key, even if the same job was submitted before",
    )


def add_submit(command: Command) -> None:
    """chunkwise submit FILE --column NAME."""
    sub = command("submit", submit, "upload a CSV and summarise one numeric column")
    sub.add_argument("file", metavar="FILE")
    sub.add_argument("--column", required=True)
    sub.add_argument("--delimiter", type=delimiter_char, default=",")
    sub.add_argument("--chunks", type=int, default=1, help="chunks to split into, 1-64")
    sub.add_argument("--priority", type=int, default=0, help="0-255, higher runs first")
    sub.add_argument(
        "--not-before", type=aware_time, metavar="TIME", help="schedule it: ISO 8601, e.g. ...Z"
    )
    add_key_choice(sub, "the file's SHA-256 and the parameters")
    sub.add_argument(
        "--label", type=label_pair, action="append", metavar="KEY=VALUE", help="repeatable"
    )
    add_wait(sub, "follow the job and print its result")


def add_enqueue(command: Command) -> None:
    """chunkwise enqueue FILE: a manifest job."""
    sub = command("enqueue", enqueue, "submit a manifest job for your own workers")
    sub.add_argument(
        "job", type=json_file, metavar="FILE", help="the manifest job (JSON; - for stdin)"
    )
    sub.add_argument(
        "--after",
        type=uuid_text,
        action="append",
        metavar="JOB",
        help="run it once this job has succeeded (repeatable; added to its depends_on)",
    )
    add_key_choice(sub, "the job's JSON, as submit's is")
    add_wait(sub, "follow the job until it finishes")


def add_status(command: Command) -> None:
    """chunkwise status JOB."""
    sub = command("status", status, "show a job")
    sub.add_argument("job", type=uuid_text, metavar="JOB")
    sub.add_argument("--watch", action="store_true", help="follow the job until it finishes")
    sub.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)


def add_job_filters(sub: argparse.ArgumentParser, statuses: tuple[str, ...]) -> None:
    """The JOB_FILTERS options, as jobs and cancel-jobs take them."""
    sub.add_argument("--workload", metavar="NAME")
    sub.add_argument("--label", type=label_filter, metavar="KEY=VALUE")
    sub.add_argument("--owner", metavar="USER", help="one user's jobs (operators see anyone's)")
    sub.add_argument("--depends-on", type=uuid_text, metavar="JOB", help="the jobs waiting for JOB")
    sub.add_argument("--status", choices=statuses)


def add_jobs(command: Command) -> None:
    """chunkwise jobs [filters]."""
    sub = command("jobs", list_jobs, "list your jobs, newest first")
    add_job_filters(sub, JOB_STATUSES)
    sub.add_argument("--limit", type=int)
    sub.add_argument("--cursor", help="the next page, as printed after a full page")


def add_cancel_jobs(command: Command) -> None:
    """chunkwise cancel-jobs FILTER..."""
    sub = command(
        "cancel-jobs",
        cancel_jobs,
        "cancel every unfinished job that matches (give at least one filter)",
    )
    add_job_filters(sub, UNFINISHED_STATUSES)
    sub.add_argument(
        "--limit", type=int, metavar="N", help="jobs per request, 1-1000 (default: the server's)"
    )
    # argparse has no "at least one of these options": parse_arguments asks this parser to
    # say so, with this command's usage.
    sub.set_defaults(usage_error=sub.error)


def add_chunks(command: Command) -> None:
    """chunkwise chunks JOB."""
    sub = command("chunks", list_chunks, "list a job's chunks")
    sub.add_argument("job", type=uuid_text, metavar="JOB")


def add_chunk(command: Command) -> None:
    """chunkwise chunk JOB CHUNK."""
    sub = command("chunk", show_chunk, "show one chunk and its attempts")
    sub.add_argument("job", type=uuid_text, metavar="JOB")
    sub.add_argument("chunk", metavar="CHUNK", help="chunk id, or its index")


def add_job_actions(command: Command) -> None:
    """chunkwise cancel|retry|result JOB."""
    for name, action, help_text in (
        ("cancel", cancel, "cancel a job"),
        ("retry", retry, "re-queue a recoverable failed job"),
        ("result", result, "print a finished job's result"),
    ):
        command(name, action, help_text).add_argument("job", type=uuid_text, metavar="JOB")


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


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    """Parse the arguments; bad usage exits as argparse's own errors do."""
    args = build_parser().parse_args(argv)
    # Without a filter every unfinished job of the caller (an operator: anyone's) would match.
    if args.command == "cancel-jobs" and not job_filters(args):
        flags = ", ".join("--" + name.replace("_", "-") for name in JOB_FILTERS)
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
