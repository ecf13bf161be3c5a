"""`make report`: deterministic 1M-record jobs through the local stack, and a recovery run.

Two samples: the plain one (few quoted fields) and the export-shaped one of issue 41 (a
multiline quoted field in about 30% of records). Writes reports/report.md, reports/report.json
and reports/timeline.png. Everything is measured in this one run: each job's wall time is shown
as a ratio to both yardsticks (bench.yardsticks: a plain csv.reader pass and DuckDB's read_csv)
over the same file, timed here on the same machine, in turns with the jobs; every turn is
printed and kept, and the ratios are given as median and range.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import psycopg

from bench.page_faults import fault_microseconds
from bench.queue import scratch_database
from bench.turns import ratios, spread
from bench.yardsticks import duckdb_totals, plain_pass
from devstack.sample_csv import generate_csv, generate_export_csv
from devstack.stack import REPO, LocalStack, database_url, stop_on_sigterm
from services import csvstats

RECORDS = 1_000_000
SEED = 20261202
CHUNKS = 8
CAPACITY = 2
# Turns of each side, every one reported; the machine may be shared with other work that slows
# any one turn, which is why the sides alternate and the ratio is taken turn by turn.
RUNS = int(os.environ.get("TURNS", "7"))
SAMPLES = {"plain": generate_csv, "export": generate_export_csv}
RUN_DIR = REPO / ".run" / "report"
OUT = REPO / "reports"
# The recovery run shortens the lease so the report does not sit out 30 s; the e2e suite
# proves recovery at the default timings.
RECOVERY_ENV = {
    "CHUNKWISE_LEASE_SECONDS": "10",
    "CHUNKWISE_HEARTBEAT_SECONDS": "3",
    "CHUNKWISE_MAINTENANCE_SECONDS": "1",
}


@dataclass(frozen=True)
class Run:
    """One job through the stack, as the API and the processes saw it."""

    job: dict
    chunks: list[dict]
    wall_seconds: float
    upload_seconds: float
    workers: list[dict]
    coordinator_peak_rss_bytes: int
    logs: Path


def timed(action) -> float:
    """Seconds one call of action takes."""
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def peak_rss_of_tree(pid: int) -> int:
    """The largest VmHWM (peak resident set) among a process and its children, in bytes."""
    import psutil

    peaks = []
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        status = Path(f"/proc/{proc.pid}/status").read_text()
        kib = next(
            int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")
        )
        peaks.append(kib * 1024)
    return max(peaks)


def run_job(stack: LocalStack, csv_path: Path) -> Run:
    """Upload the file, wait for the job to end, and collect what the stack reports."""
    client = stack.client()
    started = time.monotonic()
    # The chunkwise command's own path: the file streamed from disk, then a watch on the job.
    with csv_path.open("rb") as f:
        job = client.submit_csv_job(f, column="value", chunks=CHUNKS)
    upload = time.monotonic() - started
    job = stack.follow_job(client, job)
    wall = time.monotonic() - started
    # The list leaves each chunk's metrics out; a chunk's own page has them.
    listed = client.list_chunks(job["id"])["chunks"]
    chunks = [client.get_chunk(job["id"], c["id"]) for c in listed]
    operator = stack.client(stack.tokens.operator)
    workers = operator.list_workers()["workers"]
    client.close()
    operator.close()
    peak = peak_rss_of_tree(stack.processes["coordinator"].pid)
    return Run(job, chunks, wall, upload, workers, peak, stack.logs)


def start(url: str, run_dir: Path, env: dict, workers: dict[str, tuple[str, ...]]) -> LocalStack:
    """A coordinator and the named workers over the database."""
    stack = LocalStack(database_url=url, run_dir=run_dir, env=env)
    try:
        stack.prepare()
        stack.start_coordinator()
        for name, args in workers.items():
            stack.start_worker(name, "--capacity", str(CAPACITY), *args)
    except BaseException:
        stack.stop()  # a coordinator that never became ready is not left running
        raise
    return stack


def log_lines(logs: Path, needles: list[str]) -> list[dict]:
    """JSON log lines from every process that mention any needle, tagged with their file."""
    found = []
    for path in sorted(logs.glob("*.log")):
        for raw in path.read_text(errors="replace").splitlines():
            if not raw.startswith("{") or not any(n in raw for n in needles):
                continue
            line = json.loads(raw)
            found.append(
                {
                    "process": path.stem,
                    **{
                        k: line.get(k)
                        for k in (
                            "time",
                            "message",
                            "event",
                            "trace_id",
                            "attempt_id",
                            "task_id",
                            "worker_id",
                        )
                    },
                }
            )
    return found


def recovery_story(run: Run) -> dict:
    """Each killed attempt, its expiry and takeover, and the log lines that link them."""
    takeovers, needles = [], []
    for chunk in run.chunks:
        killed = next((a for a in chunk["attempts"] if a["state"] == "lease_expired"), None)
        if killed is None:
            continue
        recovery = next(a for a in chunk["attempts"] if a["state"] == "completed")
        takeovers.append(
            {
                "chunk_index": chunk["index"],
                "chunk_id": chunk["id"],
                "killed": killed,
                "recovery": recovery,
                "lease_expired_at": killed["finished_at"],
            }
        )
        needles += [
            killed["attempt_id"],
            recovery["attempt_id"],
            killed["trace_id"],
            recovery["trace_id"],
        ]
    return {"takeovers": takeovers, "log_lines": log_lines(run.logs, needles)}


def crash_times(run: Run) -> dict[str, datetime]:
    """When each worker process last logged anything: for a killed one, when it died."""
    last = {}
    for path in run.logs.glob("*.log"):
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.startswith("{")]
        if lines:
            stamp = json.loads(lines[-1])["time"]
            last[path.stem] = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC)
    return last


def timeline(runs: dict[str, Run], path: Path) -> None:
    """Chunk attempts per worker slot over time, one panel a run, killed attempts marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 2.6 * len(runs)), squeeze=False)
    for ax, (title, run) in zip(axes[:, 0], runs.items(), strict=True):
        t0 = datetime.fromisoformat(run.job["created_at"])
        died = crash_times(run)
        attempts = sorted(
            ((c["index"], a) for c in run.chunks for a in c["attempts"]),
            key=lambda pair: pair[1]["started_at"],
        )
        lanes: list[tuple[str, list[float]]] = []  # (worker, end time of each slot)
        labels = []
        for index, a in attempts:
            start_s = (datetime.fromisoformat(a["started_at"]) - t0).total_seconds()
            end = a["finished_at"] or run.job["completed_at"]
            end_s = (datetime.fromisoformat(end) - t0).total_seconds()
            y = _slot(lanes, labels, a["worker_id"], start_s, end_s)
            if a["state"] == "lease_expired":
                dead_s = (
                    (died[a["worker_id"]] - t0).total_seconds()
                    if a["worker_id"] in died
                    else start_s
                )
                ax.broken_barh(
                    [(start_s, dead_s - start_s)],
                    (y - 0.35, 0.7),
                    facecolors="tab:red",
                    edgecolors="black",
                )
                ax.broken_barh(
                    [(dead_s, end_s - dead_s)],
                    (y - 0.35, 0.7),
                    facecolors="mistyrose",
                    edgecolors="tab:red",
                    hatch="//",
                )
                ax.annotate(
                    f"chunk {index}: worker killed", (dead_s, y + 0.4), fontsize=8, color="tab:red"
                )
                ax.annotate(
                    "lease expired", (end_s, y - 0.55), fontsize=8, ha="right", color="tab:red"
                )
            else:
                ax.broken_barh(
                    [(start_s, end_s - start_s)],
                    (y - 0.35, 0.7),
                    facecolors="tab:blue",
                    edgecolors="black",
                )
                ax.text(
                    (start_s + end_s) / 2,
                    y,
                    str(index),
                    ha="center",
                    va="center",
                    color="white",
                    fontsize=8,
                )
        ax.set_yticks(range(len(labels)), labels)
        ax.set_ylim(-0.8, len(labels) - 0.2)
        ax.set_xlabel("seconds since the job was created (after its upload and split)")
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _slot(lanes: list, labels: list, worker: str, start: float, end: float) -> int:
    """The first free row of this worker's slots for an attempt, adding one if all are busy."""
    for row, (owner, ends) in enumerate(lanes):
        if owner == worker and ends[0] <= start + 1e-3:
            ends[0] = end
            return row
    lanes.append((worker, [end]))
    labels.append(f"{worker} slot {sum(1 for o, _ in lanes if o == worker)}")
    return len(lanes) - 1


def versions(url: str) -> dict:
    """Versions of what ran."""
    with psycopg.connect(url) as conn:
        server = conn.execute("SHOW server_version").fetchone()[0]
    packages = ("flask", "gunicorn", "psycopg", "requests", "marshmallow")
    return {
        "python": platform.python_version(),
        "postgresql": server,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        **{p: metadata.version(p) for p in packages},
    }


@dataclass(frozen=True)
class Sample:
    """One sample's file, its sequential control, and its runs taken in turns."""

    name: str
    data: bytes
    path: Path
    control: csvstats.Totals
    first_passes: list[float]  # the plain pass run first in each turn, after the last job
    references: list[float]  # the plain pass run again at once: the ratios' denominator
    duckdb: list[float]
    faults: list[float]  # microseconds a page of new memory, taken just after each job
    runs: list[Run]

    @property
    def typical(self) -> Run:
        """The job of median wall time (the slower middle one of an even count)."""
        return sorted(self.runs, key=lambda run: run.wall_seconds)[len(self.runs) // 2]


def main(argv: list[str] | None = None) -> int:
    """Generate, run both samples in turns and then the recovery run, write the report."""
    argparse.ArgumentParser(
        prog="python -m bench.report",
        description=__doc__.splitlines()[0],
        epilog=f"TURNS=N sets the number of turns per sample ({RUNS} now).",
    ).parse_args(argv)
    # Needed only for the timeline at the end: missing, it would fail after every turn had run.
    if importlib.util.find_spec("matplotlib") is None:
        raise SystemExit("bench.report draws with matplotlib: run `make report`, which installs it")
    stop_on_sigterm()
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    RUN_DIR.mkdir(parents=True)
    OUT.mkdir(exist_ok=True)
    samples = []
    for name, generate in SAMPLES.items():
        data = generate(RECORDS, seed=SEED)
        path = RUN_DIR / f"{name}.csv"
        path.write_bytes(data)
        print(f"{name}: {RECORDS:,} records ({len(data) / 2**20:.1f} MiB, seed {SEED})")
        control = csvstats.sequential_totals(data, "value")
        if plain_pass(data, "value") != control or duckdb_totals(path, "value") != control:
            raise SystemExit(f"a yardstick differs from the sequential control on {name}")
        samples.append(Sample(name, data, path, control, [], [], [], [], []))

    # A database of its own: a server kept from an earlier report still knows its workers'
    # ids, registered under that report's credentials, and would refuse this one's.
    with scratch_database(database_url(RUN_DIR)) as url:
        return run_samples(samples, url)


def run_samples(samples: list[Sample], url: str) -> int:
    """Run the samples' jobs in turns with their yardsticks, then the recovery run; write the
    report; 0 if every result equalled the sequential control."""
    stack = start(url, RUN_DIR / "run1", {}, {"worker-1": (), "worker-2": ()})
    try:
        # Side by side, taking turns, so a machine that speeds up or slows down during the
        # report moves both sides alike. Each run is a new job (no Idempotency-Key). The plain
        # pass runs twice: just after a job it took 10-40% longer than when run again at once
        # (2-core VM, 2026-12-06), which would flatter the job; the second is the denominator.
        for turn in range(RUNS):
            for sample in samples:
                sample.first_passes.append(timed(lambda s=sample: plain_pass(s.data, "value")))
                sample.references.append(timed(lambda s=sample: plain_pass(s.data, "value")))
                sample.duckdb.append(timed(lambda s=sample: duckdb_totals(s.path, "value")))
                sample.runs.append(run_job(stack, sample.path))
                # After the job, not before: the probe's pages, freed, would serve the job.
                sample.faults.append(fault_microseconds())
                job, plain = sample.runs[-1], sample.references[-1]
                print(
                    f"turn {turn + 1} {sample.name}: plain pass {plain:.2f} s"
                    f" (first {sample.first_passes[-1]:.2f} s),"
                    f" DuckDB {sample.duckdb[-1]:.2f} s, job {job.wall_seconds:.2f} s"
                    f" = {job.wall_seconds / plain:.2f}x plain, "
                    f"{job.wall_seconds / sample.duckdb[-1]:.2f}x DuckDB"
                    f" (POST {job.upload_seconds:.2f} s = {job.upload_seconds / plain:.2f}x),"
                    f" new memory {sample.faults[-1]:.1f} µs a page"
                )
        for sample in samples:
            walls = [run.wall_seconds for run in sample.runs]
            posts = [run.upload_seconds for run in sample.runs]
            print(
                f"{sample.name}: job / plain pass {spread(ratios(walls, sample.references))},"
                f" job / DuckDB {spread(ratios(walls, sample.duckdb))},"
                f" POST / plain pass {spread(ratios(posts, sample.references))},"
                f" new memory {spread(sample.faults, ' µs a page', 1)}"
                " (median, range of every turn)"
            )
    finally:
        stack.stop()

    plain = samples[0]
    stack = start(
        url,
        RUN_DIR / "run2",
        RECOVERY_ENV,
        {"worker-a": ("--fault", "crash-after-compute"), "worker-b": ()},
    )
    try:
        recovered = run_job(stack, plain.path)
    finally:
        stack.stop()
    story = recovery_story(recovered)
    print(f"recovery run: {recovered.wall_seconds:.2f} s ({recovered.job['status']})")

    timeline(
        {
            **{f"{s.name} sample, median run: 2 workers x capacity 2": s.typical for s in samples},
            "recovery run: worker-a crashes after computing, before committing": recovered,
        },
        OUT / "timeline.png",
    )
    report = build_report(samples, recovered, story, versions(url))
    (OUT / "report.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (OUT / "report.md").write_text(render_markdown(report))
    print(f"wrote {OUT / 'report.md'}, {OUT / 'report.json'}, {OUT / 'timeline.png'}")
    matches = [run.job["result"] == s.control.to_dict() for s in samples for run in s.runs]
    return 0 if all(matches) and recovered.job["result"] == plain.control.to_dict() else 1


def sample_report(sample: Sample) -> dict:
    """One sample's figures: every run in turn, and the median run's phases and chunks."""
    typical = sample.typical
    compute = [_metric(c, "elapsed_seconds", 0.0) for c in typical.chunks]
    merge_s = typical.job["merge_seconds"] or 0.0
    phases = {
        "upload, hash, split and admit (until POST returned)": typical.upload_seconds,
        "chunk computation and queueing": typical.wall_seconds - typical.upload_seconds - merge_s,
        "merge": merge_s,
    }
    return {
        "name": sample.name,
        "bytes": len(sample.data),
        "runs": [
            {
                "first_pass_seconds": first,
                "reference_seconds": ref,
                "duckdb_seconds": duck,
                "wall_seconds": run.wall_seconds,
                "post_seconds": run.upload_seconds,
                "new_memory_microseconds_a_page": faults,
            }
            for first, ref, duck, faults, run in zip(
                sample.first_passes,
                sample.references,
                sample.duckdb,
                sample.faults,
                sample.runs,
                strict=True,
            )
        ],
        "ratio_to_plain_pass": spread(
            ratios([run.wall_seconds for run in sample.runs], sample.references)
        ),
        "ratio_to_duckdb": spread(ratios([run.wall_seconds for run in sample.runs], sample.duckdb)),
        "post_ratio_to_plain_pass": spread(
            ratios([run.upload_seconds for run in sample.runs], sample.references)
        ),
        "wall_seconds": typical.wall_seconds,
        "dominant_phase": max(phases, key=phases.get),
        "phases": phases,
        "result": typical.job["result"],
        "sequential_control": sample.control.to_dict(),
        "result_matches_control": all(
            run.job["result"] == sample.control.to_dict() for run in sample.runs
        ),
        "chunks": [
            {
                "index": c["index"],
                "worker": c["attempts"][-1]["worker_id"],
                "compute_seconds": _metric(c, "elapsed_seconds", 0.0),
                "records": _metric(c, "records", None),
            }
            for c in typical.chunks
        ],
        "compute_seconds_total": sum(compute),
        "coordinator_peak_rss_bytes": typical.coordinator_peak_rss_bytes,
        "worker_peak_rss_bytes": {w["worker_id"]: w["peak_rss_bytes"] for w in typical.workers},
    }


def _metric(chunk: dict, name: str, default):
    return (chunk.get("metrics") or {}).get(name, default)


def build_report(samples: list[Sample], recovered: Run, story: dict, versions_: dict) -> dict:
    """Everything the report shows, as JSON."""
    plain = samples[0]
    return {
        "configuration": {
            "records": RECORDS,
            "seed": SEED,
            "chunks": CHUNKS,
            "workers": 2,
            "capacity_per_worker": CAPACITY,
            "lease_seconds": 30,
            "heartbeat_seconds": 10,
            "runs": RUNS,
            "recovery_run": RECOVERY_ENV,
            "versions": versions_,
        },
        "samples": [sample_report(s) for s in samples],
        "recovery": {
            "sample": plain.name,
            "wall_seconds": recovered.wall_seconds,
            "status": recovered.job["status"],
            "result_matches_control": recovered.job["result"] == plain.control.to_dict(),
            **story,
        },
    }


def render_markdown(r: dict) -> str:
    """The human report."""
    cfg = r["configuration"]
    mib = 1024 * 1024
    lines = [
        "# Chunkwise report: 1,000,000 records through the local stack, two samples",
        "",
        "Regenerate with `make report` (deterministic data, seed "
        f"{cfg['seed']}; timings are this machine's, measured in one run).",
        "",
        "## Configuration",
        "",
        f"- {cfg['records']:,} records a sample, {cfg['chunks']} chunks: "
        + ", ".join(f"{s['name']} {s['bytes'] / mib:.1f} MiB" for s in r["samples"]),
        f"- {cfg['workers']} workers x capacity {cfg['capacity_per_worker']}, lease "
        f"{cfg['lease_seconds']} s, heartbeat {cfg['heartbeat_seconds']} s "
        "(recovery run: "
        + ", ".join(
            f"{k.removeprefix('CHUNKWISE_').lower()} {v}" for k, v in cfg["recovery_run"].items()
        )
        + ")",
        "- " + ", ".join(f"{k} {v}" for k, v in cfg["versions"].items()),
        "",
        "## The distributed job against one sequential pass",
        "",
        f"Each sample's job, a plain `csv.reader` pass and DuckDB's `read_csv` over the same "
        f"file, {cfg['runs']} times in turns (the samples alternating too); each ratio is taken "
        "turn by turn: median (range). The plain pass runs twice in each turn, and the second "
        "is the denominator: the first, just after a job, is slower (in parentheses below).",
        "",
        "| sample | job / plain pass | job / DuckDB | POST / plain pass |",
        "| --- | ---: | ---: | ---: |",
        *[
            f"| {s['name']} | **{s['ratio_to_plain_pass']}** | {s['ratio_to_duckdb']} "
            f"| {s['post_ratio_to_plain_pass']} |"
            for s in r["samples"]
        ],
        "",
        "Targets: job at most 0.5x the plain pass, POST at most 0.15x. Turn after turn, with "
        "what a page of new memory cost just after the job (`bench/page_faults.py`: on a VM "
        "that backs its memory lazily, several times more than recycled memory):",
        "",
        "| turn | "
        + " | ".join(
            f"{s['name']}: pass (first) / DuckDB / job (POST), new memory" for s in r["samples"]
        )
        + " |",
        "| ---: | " + " | ".join("---:" for _ in r["samples"]) + " |",
        *[
            f"| {i + 1} | "
            + " | ".join(
                f"{t['reference_seconds']:.2f} ({t['first_pass_seconds']:.2f})"
                f" / {t['duckdb_seconds']:.2f}"
                f" / {t['wall_seconds']:.2f} ({t['post_seconds']:.2f}) s,"
                f" {t['new_memory_microseconds_a_page']:.1f} µs"
                for t in (s["runs"][i] for s in r["samples"])
            )
            + " |"
            for i in range(cfg["runs"])
        ],
        "",
    ]
    for s in r["samples"]:
        lines += [
            f"## The {s['name']} sample's median job",
            "",
            f"What dominates: **{s['dominant_phase']}** — the chunks took "
            f"{s['compute_seconds_total']:.2f} s of compute in all, on {cfg['workers']} x "
            f"{cfg['capacity_per_worker']} slots sharing {os.cpu_count()} cores with the "
            "coordinator.",
            "",
            "| phase | seconds |",
            "| --- | ---: |",
            *[f"| {name} | {sec:.3f} |" for name, sec in s["phases"].items()],
            "",
            "| | count | sum | min | max |",
            "| --- | ---: | ---: | ---: | ---: |",
            *[
                f"| {name} | {v['count']} | {v['sum']} | {v['min']} | {v['max']} |"
                for name, v in (
                    ("chunked job", s["result"]),
                    ("sequential control", s["sequential_control"]),
                )
            ],
            "",
            f"Result equals the control: **{s['result_matches_control']}**.",
            "",
            "| chunk | worker | compute s | records |",
            "| ---: | --- | ---: | ---: |",
            *[
                f"| {c['index']} | {c['worker']} | {c['compute_seconds']:.3f} | {c['records']} |"
                for c in s["chunks"]
            ],
            "",
            f"Peak resident memory: coordinator {s['coordinator_peak_rss_bytes'] / mib:.0f} MiB; "
            + ", ".join(
                f"{w} {b / mib:.0f} MiB" for w, b in s["worker_peak_rss_bytes"].items() if b
            ),
            "",
        ]
    lines += [
        "## Recovery: a worker killed after computing, before committing "
        f"({r['recovery']['sample']} sample)",
        "",
    ]
    rec = r["recovery"]
    for takeover in rec["takeovers"]:
        killed, recovery = takeover["killed"], takeover["recovery"]
        lines += [
            f"- Chunk {takeover['chunk_index']}: attempt {killed['attempt']} by "
            f"`{killed['worker_id']}` leased at {killed['started_at']} and never committed "
            "(the worker exited with `crash-after-compute`). The lease expired and was swept at "
            f"{takeover['lease_expired_at']}; `{recovery['worker_id']}` leased it at "
            f"{recovery['started_at']} as attempt {recovery['attempt']} and committed at "
            f"{recovery['finished_at']}.",
        ]
    lines += [
        "",
        f"The job {rec['status']} in {rec['wall_seconds']:.2f} s; result equals the control: "
        f"**{rec['result_matches_control']}**.",
        "",
        "| chunk | attempt | attempt_id | trace_id | worker | outcome |",
        "| ---: | ---: | --- | --- | --- | --- |",
        *[
            f"| {t['chunk_index']} | {a['attempt']} | `{a['attempt_id']}` | `{a['trace_id']}` | "
            f"{a['worker_id']} | {a['state']} |"
            for t in rec["takeovers"]
            for a in (t["killed"], t["recovery"])
        ],
        "",
        "Log lines that carry those ids, from the coordinator's and the workers' logs:",
        "",
        "| process | time | event | trace_id | attempt_id |",
        "| --- | --- | --- | --- | --- |",
        *[
            f"| {ln['process']} | {ln['time']} | {ln['event'] or ln['message']} | "
            f"`{ln['trace_id']}` | `{ln['attempt_id']}` |"
            for ln in rec["log_lines"]
        ],
        "",
        "![chunk attempts per worker over time](timeline.png)",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
