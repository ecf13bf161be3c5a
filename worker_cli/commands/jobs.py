"""chunkwise submit, enqueue, status, result, jobs, cancel, cancel-jobs and retry."""

from __future__ import annotations

import argparse
import json
import uuid

from worker_cli import tables
from worker_cli.client import SubmittedJob
from worker_cli.commands.arguments import (
    Command,
    add_wait,
    aware_time,
    delimiter_char,
    json_file,
    label_filter,
    label_pair,
    uuid_text,
)
from worker_cli.commands.idempotency_keys import default_idempotency_key, file_sha256, key_naming
from worker_cli.commands.invocation import EXIT_JOB_UNSUCCESSFUL, EXIT_OK, Invocation
from worker_cli.jobs import FINISHED

# How often a job's progress line may list its chunks to count records done (RecordsDone).
RECORDS_EVERY = 1.0

UNSUCCESSFUL = frozenset({"failed", "cancelled"})
JOB_STATUSES = ("queued", "running", "merging", "succeeded", "failed", "cancelled")
UNFINISHED_STATUSES = tuple(status for status in JOB_STATUSES if status not in FINISHED)
# The options `jobs` and `cancel-jobs` filter by, as the API names them.
JOB_FILTERS = ("workload", "label", "owner", "depends_on", "status")


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
    """Follow a job until it finishes, drawing its progress on stderr every `interval` seconds."""
    progress = tables.ProgressDisplay(cli.err, clock=cli.clock)
    total = (job.get("parameters") or {}).get("records")
    records = None if total is None else RecordsDone(cli, total)
    version = None
    try:
        while True:
            progress.show(job, None if records is None else records.of(job))
            if job["status"] in FINISHED:
                return job
            # The coordinator answers as soon as the job finishes, else after `interval` with
            # the job if it changed: an answer at every change would cost it a view of the job
            # per chunk done, which a short job pays for in its own wall time.
            changed, version = cli.call(
                cli.client.watch_job,
                job["id"],
                version,
                wait_seconds=interval,
                until_finished=True,
            )
            job = changed or job
    finally:
        progress.finish()


class RecordsDone:
    """The records a CSV job's completed chunks hold, for its progress line.

    Read from its chunk list, which costs the coordinator more than the job's own answer: only
    when a chunk has completed, at most once every RECORDS_EVERY seconds while the job runs
    (the line may lag that long), and not at all when none or every chunk has completed.
    """

    def __init__(self, cli: Invocation, total: int):
        self.cli, self.total = cli, total
        self.count: int | None = None
        self.completed: int | None = None
        self.listed_at: float | None = None

    def of(self, job: dict) -> int | None:
        """Records done as of the job's view (or of a listing less than RECORDS_EVERY old)."""
        completed = job["chunks_completed"]
        if completed == self.completed:
            return self.count
        if completed in (0, job["chunks_total"]):
            self.count = 0 if completed == 0 else self.total
        elif (
            self.listed_at is not None
            and self.cli.clock() - self.listed_at < RECORDS_EVERY
            and job["status"] not in FINISHED
        ):
            return self.count
        else:
            chunks = self.cli.call(self.cli.client.list_chunks, job["id"])["chunks"]
            self.count, self.listed_at = tables.records_done(chunks), self.cli.clock()
        self.completed = completed
        return self.count


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


def add_job_actions(command: Command) -> None:
    """chunkwise cancel|retry|result JOB."""
    for name, action, help_text in (
        ("cancel", cancel, "cancel a job"),
        ("retry", retry, "re-queue a recoverable failed job"),
        ("result", result, "print a finished job's result"),
    ):
        command(name, action, help_text).add_argument("job", type=uuid_text, metavar="JOB")
