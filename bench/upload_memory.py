"""The coordinator's peak memory during a large upload, on the text/csv and multipart paths.

python -m bench.upload_memory [--mib 49] [--turns 3] (the default upload limit is 50 MiB).
Starts a coordinator (no workers) over DATABASE_URL or an embedded server and warms it with
small uploads. Then, for each turn and path, it resets every coordinator process's peak
resident set (/proc/PID/clear_refs), uploads the export-shaped sample (a multiline quoted
field in 30% of records) and reads the peaks back. Prints the largest peak over a process's
own resident set just before the upload; the target is idle + 32 MiB.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from bench.report import start
from devstack.sample_csv import generate_export_csv
from devstack.stack import REPO, database_url, stop_on_sigterm

RUN_DIR = REPO / ".run" / "upload-memory"
MIB = 1 << 20
_BYTES_PER_RECORD = 41.6  # of the export sample, measured on 1,000,000 records


def _status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def coordinator_pids(root: int) -> list[int]:
    """gunicorn's arbiter and its workers."""
    import psutil

    return [root, *(p.pid for p in psutil.Process(root).children(recursive=True))]


def upload_peak(stack, path: Path, form: bool, chunks: int = 8) -> tuple[int, int]:
    """(largest rise of a coordinator process's peak RSS over its RSS before, that RSS)."""
    pids = coordinator_pids(stack.processes["coordinator"].pid)
    before = {}
    for pid in pids:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # peak := current
        before[pid] = _status(pid, "VmRSS")
    client = stack.client()
    with path.open("rb") as f:
        job = client.submit_csv_job(f, column="value", chunks=chunks, form=form)
    rise, idle = max((_status(pid, "VmHWM") - before[pid], before[pid]) for pid in pids)
    # No worker runs it: cancelled, so that more turns never meet the queue's bound per user.
    client.cancel_job(job["id"])
    client.close()
    return rise, idle


def main(argv: list[str] | None = None) -> None:
    """Generate the sample, start the coordinator, and print every turn's peaks."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=float, default=49.0)
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args(argv)
    stop_on_sigterm()
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    RUN_DIR.mkdir(parents=True)
    data = generate_export_csv(int(args.mib * MIB / _BYTES_PER_RECORD), seed=41)
    path = RUN_DIR / "export.csv"
    path.write_bytes(data)
    small = RUN_DIR / "small.csv"
    small.write_bytes(generate_export_csv(1000, seed=1))
    print(f"export sample: {len(data) / MIB:.1f} MiB; shared 2-core machine")
    stack = start(database_url(RUN_DIR), RUN_DIR / "stack", {}, {})
    try:
        for form in (False, True):  # every code path imported before any peak is taken
            upload_peak(stack, small, form, chunks=1)
        for turn in range(args.turns):
            for form in (False, True):
                rise, idle = upload_peak(stack, path, form)
                name = "multipart form" if form else "text/csv body"
                print(
                    f"turn {turn + 1} {name}: peak RSS idle {idle / MIB:.0f} MiB"
                    f" + {rise / MIB:.1f} MiB"
                )
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
