"""Run every reliability scenario and write reports/reliability.md and .json.

ROUNDS (default 2) scales the rounds of each scenario; SCENARIOS (comma list) picks some;
SECONDS_BUDGET (default 1500) bounds the whole run: rounds not started by then are skipped.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import time
from datetime import UTC, datetime

from bench.reliability import coordinator, database, figures, invariants, races, storage, workers
from bench.reliability.harness import Bench
from devstack.observe import FAST
from devstack.stack import REPO, database_url, stop_on_sigterm

RUN_DIR = REPO / ".run" / "reliability"
OUT = REPO / "reports"
SCENARIOS = {
    "worker SIGKILL": workers.kill_points,
    "zombie writer": workers.zombie,
    "PostgreSQL restart": database.restart,
    "backend termination": database.terminate_backends,
    "coordinator SIGKILL": coordinator.kill_around_merge,
    "cancel racing the last commit": races.cancel_race,
    "50 same-key submits": races.same_key_submits,
    "admission cap": races.admission_cap,
    "unwritable archive": storage.unwritable_archive,
}


def main() -> int:
    """Run the chosen scenarios and write the report; exit 1 if any round failed."""
    stop_on_sigterm()
    rounds = int(os.environ.get("ROUNDS") or 2)
    seconds = float(os.environ.get("SECONDS_BUDGET") or 1500)
    chosen = [s.strip() for s in os.environ.get("SCENARIOS", "").split(",") if s.strip()]
    started_at, started = datetime.now(UTC), time.monotonic()
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    RUN_DIR.mkdir(parents=True)
    bench = Bench(database_url(RUN_DIR), RUN_DIR, rounds, seconds)
    results = {}
    for name, scenario in SCENARIOS.items():
        if chosen and not any(c in name for c in chosen):
            continue
        print(f"{name}:", flush=True)
        scenario_started = time.monotonic()
        try:
            result = scenario(bench)
        except Exception as exc:  # noqa: BLE001 - one broken scenario must not hide the others
            result = {"description": "did not run to its end", "rounds": [], "error": repr(exc)}
            print(f"  scenario failed: {exc!r}", flush=True)
        result["seconds"] = round(time.monotonic() - scenario_started, 1)
        result["summary"] = figures.scenario_summary(result["rounds"])
        if result.get("error"):
            result["summary"]["failed_rounds"].append("scenario")
        results[name] = result
    report = {
        "started_at": started_at.isoformat(timespec="seconds"),
        "duration_seconds": round(time.monotonic() - started, 1),
        "rounds_setting": rounds,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "timings": {k: v for k, v in FAST.items() if k != "CHUNKWISE_LOG_LEVEL"},
        "database": "DATABASE_URL" if os.environ.get("DATABASE_URL") else "embedded",
        "invariants": [i.rule for i in invariants.INVARIANTS],
        "scenarios": results,
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "reliability.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (OUT / "reliability.md").write_text(figures.render_markdown(report))
    print(f"wrote {OUT / 'reliability.md'} in {report['duration_seconds']:.0f} s")
    failed = [n for n, r in results.items() if r["summary"]["failed_rounds"]]
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
