"""Time split and summarise against a plain csv.reader pass over the same 1M-record file.

python -m bench.csv_core [--records 1000000] [--sample plain|quoted|both]; each figure is the
best of 3 runs. "quoted" is the quote-heavy sample of issue 15 (a quarter of text fields
quoted, some multiline); "plain" is the report's original sample.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import time
from collections.abc import Callable

from devstack.sample_csv import generate_csv, generate_quoted_csv
from services.csvstats import (
    INT64_MAX,
    INT64_MIN,
    Totals,
    merge,
    sequential_totals,
    split,
    summarise,
)

COLUMN = "value"
CHUNKS = 8
BLOCK_BYTES = 64 * 1024  # what a worker's streamed download hands over at a time
_INTEGER = re.compile(r"[+-]?[0-9]+")
SAMPLES = {"plain": generate_csv, "quoted": generate_quoted_csv}


def reference_totals(data: bytes, column: str) -> Totals:
    """The plain loop the targets are measured against: csv.reader, a checked add per value."""
    reader = csv.reader(io.StringIO(data.decode("utf-8-sig"), newline=""))
    index = next(reader).index(column)
    total, count, minimum, maximum = 0, 0, None, None
    for row in reader:
        if not row:
            continue
        raw = row[index].strip(" \t")
        if not raw:
            continue
        if not _INTEGER.fullmatch(raw):
            raise ValueError(f"not an integer: {raw!r}")
        value = int(raw)
        if not INT64_MIN <= value <= INT64_MAX:
            raise ValueError(f"out of int64 range: {raw!r}")
        total += value
        if not INT64_MIN <= total <= INT64_MAX:
            raise OverflowError("int64 sum overflow")
        count += 1
        minimum = value if minimum is None or value < minimum else minimum
        maximum = value if maximum is None or value > maximum else maximum
    return Totals(count, total, minimum, maximum)


def summarise_all(data: bytes) -> Totals:
    """Split, then summarise every chunk in this process, then merge."""
    result = split(data, COLUMN, chunks=CHUNKS)
    summaries = []
    for plan in result.plans:
        blocks = (
            data[at : min(at + BLOCK_BYTES, plan.byte_end)]
            for at in range(plan.byte_start, plan.byte_end, BLOCK_BYTES)
        )
        summaries.append(
            summarise(
                blocks,
                column_index=result.column_index,
                column=COLUMN,
                record_start=plan.record_start,
                first_line=plan.first_line,
            )
        )
    return merge(result.plans, summaries)


def fastest(runs: int, actions: dict[str, Callable[[], object]]) -> dict[str, tuple]:
    """Run each action `runs` times, interleaved so that a busy machine slows all of them
    alike; return name -> (best wall seconds, best CPU seconds, last result)."""
    best: dict[str, tuple] = {name: (float("inf"), float("inf"), None) for name in actions}
    for _ in range(runs):
        for name, action in actions.items():
            wall, cpu = time.perf_counter(), time.process_time()
            result = action()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            best[name] = (min(best[name][0], wall), min(best[name][1], cpu), result)
    return best


def main(argv: list[str] | None = None) -> None:
    """Generate the file, time the passes and print seconds and ratios to the reference."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sample", choices=(*SAMPLES, "both"), default="both")
    args = parser.parse_args(argv)
    for name in SAMPLES if args.sample == "both" else (args.sample,):
        data = SAMPLES[name](args.records)
        size = len(data) / 1e6
        print(f"\n{name} sample: {args.records} records, {size:.1f} MB, best of {args.runs}")
        time_passes(data, args.runs)


def time_passes(data: bytes, runs: int) -> None:
    """Time the passes over one file and print seconds and ratios to the reference."""
    plans = split(data, COLUMN, chunks=CHUNKS)
    chunk_bytes = [data[p.byte_start : p.byte_end] for p in plans.plans]

    def summarise_chunks() -> list:
        return [
            summarise(
                [b],
                column_index=plans.column_index,
                column=COLUMN,
                record_start=p.record_start,
                first_line=p.first_line,
            )
            for p, b in zip(plans.plans, chunk_bytes, strict=True)
        ]

    timed = fastest(
        runs,
        {
            "reference": lambda: reference_totals(data, COLUMN),
            "split": lambda: split(data, COLUMN, chunks=CHUNKS),
            "summarise": summarise_chunks,
        },
    )
    once = fastest(
        1,
        {
            "pipeline": lambda: summarise_all(data),
            "sequential": lambda: sequential_totals(data, COLUMN),
        },
    )
    expected = timed["reference"][2]
    merged = merge(plans.plans, timed["summarise"][2])
    if not merged == once["pipeline"][2] == once["sequential"][2] == expected:
        raise SystemExit(f"results differ: {merged} {once} {expected}")
    print(f"result: {expected}")
    reference_wall, reference_cpu = timed["reference"][:2]
    rows = [
        ("reference csv.reader pass", timed["reference"], None),
        (f"split, {CHUNKS} chunks", timed["split"], 0.25),
        ("summarise all chunks, one process", timed["summarise"], 1.0),
        (f"split + summarise ({BLOCK_BYTES // 1024} KiB blocks) + merge", once["pipeline"], None),
        ("sequential_totals (the checked reference)", once["sequential"], None),
    ]
    print(f"{'':52s} {'wall s':>7s} {'ratio':>6s}  {'cpu s':>6s} {'ratio':>6s}")
    for name, (wall, cpu, _), target in rows:
        ratio = wall / reference_wall
        verdict = (
            ""
            if target is None
            else (f"  target <= {target:.2f}x: " + ("ok" if ratio <= target else "MISSED"))
        )
        print(
            f"{name:52s} {wall:7.3f} {ratio:5.2f}x  {cpu:6.3f} {cpu / reference_cpu:5.2f}x{verdict}"
        )


if __name__ == "__main__":
    main()
