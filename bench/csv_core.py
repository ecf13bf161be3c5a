"""Time split and summarise against a plain csv.reader pass over the same 1M-record file.

python -m bench.csv_core [--records 1000000]; each figure is the best of 3 runs.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import time
from collections.abc import Callable

from bench.sample_csv import generate_csv
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
        blocks = (data[at:min(at + BLOCK_BYTES, plan.byte_end)]
                  for at in range(plan.byte_start, plan.byte_end, BLOCK_BYTES))
        summaries.append(summarise(blocks, column_index=result.column_index, column=COLUMN,
                                   record_start=plan.record_start, first_line=plan.first_line))
    return merge(result.plans, summaries)


def best_of(runs: int, action: Callable[[], object]) -> tuple[float, object]:
    """Return the fastest wall time of `runs` calls, and the last call's result."""
    best, result = float("inf"), None
    for _ in range(runs):
        started = time.perf_counter()
        result = action()
        best = min(best, time.perf_counter() - started)
    return best, result


def main(argv: list[str] | None = None) -> None:
    """Generate the file, time the three passes and print seconds and ratios."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    data = generate_csv(args.records)
    print(f"{args.records} records, {len(data) / 1e6:.1f} MB, best of {args.runs}")

    reference_s, expected = best_of(args.runs, lambda: reference_totals(data, COLUMN))
    split_s, _ = best_of(args.runs, lambda: split(data, COLUMN, chunks=CHUNKS))
    plans = split(data, COLUMN, chunks=CHUNKS)
    chunk_bytes = [data[p.byte_start:p.byte_end] for p in plans.plans]
    summarise_s, summaries = best_of(args.runs, lambda: [
        summarise([b], column_index=plans.column_index, column=COLUMN,
                  record_start=p.record_start, first_line=p.first_line)
        for p, b in zip(plans.plans, chunk_bytes, strict=True)])
    pipeline_s, pipelined = best_of(1, lambda: summarise_all(data))
    sequential_s, sequential = best_of(1, lambda: sequential_totals(data, COLUMN))

    merged = merge(plans.plans, summaries)
    if not merged == pipelined == sequential == expected:
        raise SystemExit(f"results differ: {merged} {pipelined} {sequential} {expected}")
    print(f"result: {expected}")
    rows = [("reference csv.reader pass", reference_s, None),
            (f"split, {CHUNKS} chunks", split_s, 0.25),
            ("summarise all chunks", summarise_s, 1.0),
            (f"split + summarise ({BLOCK_BYTES // 1024} KiB blocks) + merge", pipeline_s, None),
            ("sequential_totals (the checked reference)", sequential_s, None)]
    for name, seconds, target in rows:
        ratio = seconds / reference_s
        verdict = "" if target is None else ("  ok" if ratio <= target else "  OVER TARGET")
        goal = "" if target is None else f" (target <= {target:.2f}x)"
        print(f"{name:52s} {seconds:7.3f} s  {ratio:5.2f}x{goal}{verdict}")


if __name__ == "__main__":
    main()
