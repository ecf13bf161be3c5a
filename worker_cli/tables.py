"""Human output of the chunkwise command: aligned tables, key/value blocks, the progress bar."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import TextIO

CHUNK_STATES = ("pending", "leased", "completed", "failed", "cancelled")
RESULT_FIELDS = ("count", "sum", "min", "max")
BAR_WIDTH = 30
PLAIN_PROGRESS_EVERY = 10.0
NONE = "-"


# -- building blocks ------------------------------------------------------------------------


def render_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Columns padded to their widest cell; numbers right-aligned."""
    rows = [list(row) for row in rows]
    cells = [list(headers)] + [[_cell(value) for value in row] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(headers))]
    numeric = [bool(rows) and all(_is_number(row[i]) for row in rows) for i in range(len(headers))]
    lines = []
    for line in cells:
        padded = [
            cell.rjust(w) if num else cell.ljust(w)
            for cell, w, num in zip(line, widths, numeric, strict=True)
        ]
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines)


def render_pairs(pairs: Iterable[tuple[str, object]]) -> str:
    """A key/value block with the values lined up; pairs whose value is None are left out."""
    pairs = [(key, _cell(value)) for key, value in pairs if value is not None]
    width = max((len(key) for key, _ in pairs), default=0)
    return "\n".join(f"{key.ljust(width)}  {value}".rstrip() for key, value in pairs)


def _cell(value: object) -> str:
    if value is None:
        return NONE
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items()) or NONE
    return str(value)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def parse_time(text: str | None) -> datetime | None:
    """An ISO 8601 timestamp from the API as an aware datetime."""
    if not text:
        return None
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def format_time(text: str | None) -> str | None:
    """A timestamp from the API as `YYYY-MM-DD HH:MM:SS` UTC."""
    moment = parse_time(text)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if moment else None


def format_age(seconds: float | None) -> str:
    """A duration for people: `3.2 s`, `4 min 5 s`, `2 h 3 min`."""
    if seconds is None:
        return NONE
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def age_of(text: str | None, now: datetime) -> float | None:
    """Seconds from an API timestamp to now."""
    moment = parse_time(text)
    return max(0.0, (now - moment).total_seconds()) if moment else None


def format_bytes(size: int | None) -> str:
    """A byte count in binary units."""
    if size is None:
        return NONE
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


# -- jobs -----------------------------------------------------------------------------------


def job_table(jobs: list[dict]) -> str:
    """The job list."""
    rows = [
        [
            j["id"],
            j["workload"],
            j.get("owner"),
            j["status"],
            f"{j['progress']:.0%}",
            f"{j['chunks_completed']}/{j['chunks_total']}",
            j["priority"],
            j.get("labels") or None,
            format_time(j["created_at"]),
        ]
        for j in jobs
    ]
    return render_table(
        [
            "ID",
            "WORKLOAD",
            "OWNER",
            "STATUS",
            "PROGRESS",
            "CHUNKS",
            "PRIORITY",
            "LABELS",
            "CREATED",
        ],
        rows,
    )


def job_detail(job: dict) -> str:
    """One job: status, progress, parameters, times, and its result or error."""
    params = {k: v for k, v in (job.get("parameters") or {}).items() if k != "column_index"}
    pairs = [
        ("job", job["id"]),
        ("status", job["status"]),
        ("workload", job["workload"]),
        ("owner", job.get("owner")),
        (
            "progress",
            f"{job['chunks_completed']}/{job['chunks_total']} chunks ({job['progress']:.0%})",
        ),
        (
            "chunks",
            ", ".join(
                f"{state} {count}" for state, count in (job.get("chunks_by_state") or {}).items()
            ),
        ),
        ("parameters", params or None),
        ("priority", job["priority"]),
        ("labels", job.get("labels") or None),
        ("input", job.get("input_digest")),
        ("created", format_time(job.get("created_at"))),
        ("not before", format_time(job.get("not_before"))),
        ("depends on", ", ".join(job.get("depends_on") or ()) or None),
        ("timeout", _timeout(job.get("timeout_seconds"))),
        ("started", format_time(job.get("started_at"))),
        ("completed", format_time(job.get("completed_at"))),
        ("trace id", job.get("trace_id")),
        ("result", _totals(job.get("result"))),
        ("error", error_summary(job.get("error"))),
        ("partial result", _totals(job.get("partial_result"))),
    ]
    return render_pairs(pairs)


def _timeout(seconds: int | None) -> str | None:
    return f"{seconds} s an attempt" if seconds else None


def result_block(result: dict) -> str:
    """A csv_stats result: count, sum, min, max, one per line (exact integers)."""
    ordered = [(key, result.get(key)) for key in RESULT_FIELDS if key in result]
    extra = [(key, value) for key, value in result.items() if key not in RESULT_FIELDS]
    return render_pairs((key, NONE if value is None else value) for key, value in ordered + extra)


def manifest_table(results: list[dict]) -> str:
    """A manifest job's result manifests."""
    rows = [[r["chunk_index"], r["attempt"], r["result_uri"], r["result_sha256"]] for r in results]
    return render_table(["CHUNK", "ATTEMPT", "RESULT URI", "SHA-256"], rows)


def error_summary(error: dict | None) -> str | None:
    """`code: message` of an error object."""
    if not error:
        return None
    return f"{error.get('code')}: {error.get('message')}"


def _totals(result: dict | None) -> str | None:
    if not result:
        return None
    return " ".join(f"{key}={result.get(key)}" for key in RESULT_FIELDS if key in result)


# -- chunks ---------------------------------------------------------------------------------


def chunk_table(chunks: list[dict]) -> str:
    """A job's chunks in order."""
    rows = [
        [
            c["index"],
            c["id"],
            c["state"],
            f"{c['attempt']}/{c['max_attempts']}",
            _record_range(c),
            c.get("lease_owner"),
            error_summary(c.get("error")),
        ]
        for c in chunks
    ]
    return render_table(
        ["INDEX", "ID", "STATE", "ATTEMPT", "RECORDS", "LEASE OWNER", "ERROR"], rows
    )


def chunk_detail(chunk: dict) -> str:
    """One chunk and the table of its attempts."""
    pairs = [
        ("chunk", chunk["id"]),
        ("index", chunk["index"]),
        ("records", _record_range(chunk)),
        ("state", chunk["state"]),
        ("attempt", f"{chunk['attempt']} of {chunk['max_attempts']}"),
        ("lease owner", chunk.get("lease_owner")),
        ("lease expires", format_time(chunk.get("lease_expires_at"))),
        ("deadline", format_time(chunk.get("deadline"))),
        ("not before", format_time(chunk.get("not_before"))),
        ("input sha256", chunk.get("input_sha256")),
        ("summary", _totals(chunk.get("summary"))),
        ("metrics", chunk.get("metrics") or None),
        ("error", error_summary(chunk.get("error"))),
    ]
    attempts = [
        [
            a["attempt"],
            a["worker_id"],
            a["state"],
            format_time(a.get("started_at")),
            format_time(a.get("finished_at")),
            a.get("trace_id"),
            error_summary(a.get("error")),
        ]
        for a in chunk.get("attempts") or []
    ]
    table = render_table(
        ["ATTEMPT", "WORKER", "STATE", "STARTED", "FINISHED", "TRACE ID", "ERROR"], attempts
    )
    return f"{render_pairs(pairs)}\n\n{table}"


def _record_range(chunk: dict) -> str | None:
    start, end = chunk.get("record_start"), chunk.get("record_end")
    return None if start is None or end is None else f"{start}-{end}"


def records_done(chunks: list[dict]) -> int:
    """Records covered by completed chunks."""
    return sum(
        c["record_end"] - c["record_start"]
        for c in chunks
        if c["state"] == "completed" and c.get("record_start") is not None
    )


# -- events ---------------------------------------------------------------------------------


def event_line(event: dict) -> str:
    """One event as a line with fixed-width columns, so a followed feed stays aligned."""
    payload = json.dumps(event.get("payload") or {}, separators=(",", ":"))
    return (
        f"{event['id']:>8}  {format_time(event['created_at'])}  {event['job_id']}  "
        f"{event['event']:<16}  {payload}"
    ).rstrip()


# -- operator views -------------------------------------------------------------------------


def schedule_table(schedules: list[dict]) -> str:
    """Schedules, one line each: when each runs next, and what its last run did."""
    rows = [
        (
            s["name"],
            s.get("owner"),
            s["cron"] if s.get("timezone", "UTC") == "UTC" else f"{s['cron']} ({s['timezone']})",
            "paused" if s["paused"] else format_time(s["next_run_at"]),
            format_time(s.get("last_run_at")),
            # The job it submitted, or why it submitted none.
            error_summary(s.get("last_error")) or s.get("last_job_id"),
        )
        for s in schedules
    ]
    headers = ["NAME", "OWNER", "CRON", "NEXT RUN (UTC)", "LAST RUN", "LAST OUTCOME"]
    return render_table(headers, rows)


def queue_view(queue: dict) -> str:
    """Chunks by workload and state, jobs by status, oldest pending chunk, leases, pauses."""
    by_workload: dict[str, dict[str, int]] = {}
    for row in queue.get("chunks") or []:
        by_workload.setdefault(row["workload"], {})[row["state"]] = row["count"]
    states = list(CHUNK_STATES) + sorted(
        {s for counts in by_workload.values() for s in counts} - set(CHUNK_STATES)
    )
    table = render_table(
        ["WORKLOAD", *[s.upper() for s in states]],
        [[w, *[counts.get(s, 0) for s in states]] for w, counts in sorted(by_workload.items())],
    )
    jobs = ", ".join(f"{status} {n}" for status, n in (queue.get("jobs_by_status") or {}).items())
    unfinished = sum(c.get("pending", 0) + c.get("leased", 0) for c in by_workload.values())
    pairs = [
        ("jobs", jobs or "none"),
        ("oldest pending chunk", format_age(queue.get("oldest_pending_seconds"))),
        (
            "waiting",
            ", ".join(f"{w} {n}" for w, n in sorted((queue.get("waiting") or {}).items())) or None,
        ),
        (
            "active leases",
            f"{queue['active_leases']} of {queue['max_leases_total']} "
            f"(at most {queue['max_leases_per_worker']} per worker)",
        ),
        ("oldest lease", format_age(queue.get("oldest_lease_seconds"))),
        ("unfinished chunks", f"{unfinished} of {queue['max_queued_chunks']} admitted at most"),
        ("schedules", _schedule_figures(queue.get("schedules"))),
        ("paused workloads", _paused_workloads(queue.get("paused_workloads"))),
    ]
    return f"{table}\n\n{render_pairs(pairs)}"


def _schedule_figures(figures: dict | None) -> str | None:
    if not figures:
        return None
    said = f"{figures['active']} active, {figures['paused']} paused, {figures['failing']} failing"
    lag = figures.get("lag_seconds")
    return f"{said}; a run {format_age(lag)} late" if lag else said


def _paused_workloads(pauses: list[dict] | None) -> str | None:
    return ", ".join(f"{p['workload']} ({pause_note(p)})" for p in pauses or ()) or None


def pause_note(pause: dict) -> str:
    """Who paused a workload and since when: `by ana since 2026-12-05 11:00:00 UTC`."""
    return f"by {pause['paused_by']} since {format_time(pause['paused_at'])} UTC"


def workload_table(workloads: list[dict]) -> str:
    """Served workloads, one line each: running or paused (by whom, since when), and caps."""
    rows = [
        (
            w["workload"],
            "paused" if w["paused"] else "running",
            w.get("paused_by"),
            format_time(w.get("paused_at")),
            w.get("max_leases_per_worker"),
            w.get("max_leases_total"),
            w["max_queued_tasks"],
            w["max_tasks_per_job"],
            w.get("max_starts_per_second"),
        )
        for w in workloads
    ]
    headers = [
        "WORKLOAD",
        "STATE",
        "PAUSED BY",
        "PAUSED SINCE (UTC)",
        "MAX LEASES/WORKER",
        "MAX LEASES",
        "MAX QUEUED TASKS",
        "MAX TASKS/JOB",
        "MAX STARTS/S",
    ]
    return render_table(headers, rows)


def leases_against(held: int, limit: int | None) -> str:
    """Leases held, of the most the worker can hold when the coordinator says."""
    return f"{held} of {limit}" if limit is not None else str(held)


def worker_table(workers: list[dict], now: datetime) -> str:
    """Each worker's last heartbeat age, leases, chunks done and peak memory."""
    rows = [
        [
            w["worker_id"],
            f"{format_age(age_of(w.get('last_seen_at'), now))} ago",
            w.get("capacity"),
            ",".join(w.get("workloads") or []) or None,
            leases_against(w["leases_held"], w.get("lease_limit")),
            w["tasks_done"],
            format_bytes(w.get("peak_rss_bytes")),
        ]
        for w in workers
    ]
    return render_table(
        [
            "WORKER",
            "LAST HEARTBEAT",
            "CAPACITY",
            "WORKLOADS",
            "LEASES",
            "CHUNKS DONE",
            "PEAK MEMORY",
        ],
        rows,
    )


# -- progress -------------------------------------------------------------------------------


class ProgressDisplay:
    """A job's progress on stderr: a redrawn bar on a terminal, a line now and then otherwise."""

    def __init__(self, stream: TextIO, *, clock: Callable[[], float] = time.monotonic):
        self._stream = stream
        self._clock = clock
        self._started = clock()
        self._tty = bool(getattr(stream, "isatty", lambda: False)())
        self._last_line: str | None = None
        self._last_plain_at: float | None = None
        self._last_state: tuple | None = None

    def show(self, job: dict, records: int | None) -> None:
        """Draw the job's current progress."""
        elapsed = self._clock() - self._started
        line = progress_line(job, records, elapsed)
        if self._tty:
            bar = _bar(job["chunks_completed"], job["chunks_total"])
            self._stream.write(f"\r{bar} {line}\x1b[K")
            self._stream.flush()
            self._last_line = line
            return
        state = (job["status"], job["chunks_completed"], records)
        now = self._clock()
        due = self._last_plain_at is None or now - self._last_plain_at >= PLAIN_PROGRESS_EVERY
        if state != self._last_state or due:
            self._stream.write(line + "\n")
            self._stream.flush()
            self._last_state, self._last_plain_at = state, now

    def finish(self) -> None:
        """End the bar's line so what follows starts on a fresh one."""
        if self._tty and self._last_line is not None:
            self._stream.write("\n")
            self._stream.flush()


def progress_line(job: dict, records: int | None, elapsed: float) -> str:
    """`running  12/16 chunks  150000/200000 records  00:12`."""
    parts = [job["status"], f"{job['chunks_completed']}/{job['chunks_total']} chunks"]
    total_records = (job.get("parameters") or {}).get("records")
    if records is not None and total_records is not None:
        parts.append(f"{records}/{total_records} records")
    minutes, seconds = divmod(int(elapsed), 60)
    parts.append(f"{minutes:02d}:{seconds:02d}")
    return "  ".join(parts)


def _bar(done: int, total: int) -> str:
    filled = BAR_WIDTH * done // total if total else 0
    return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"
