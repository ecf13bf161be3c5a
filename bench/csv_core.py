"""Time split and summarise in this process against the two yardsticks, on both samples.

python -m bench.csv_core [--records 1000000] [--turns 5] [--sample plain|export|both]. The
yardsticks (bench.yardsticks) are a plain csv.reader pass and DuckDB's read_csv; "export" is
the quote-heavy sample with a multiline quoted field in about 30% of records. Every side is
timed in alternating turns and every turn is printed, with the median and range of each ratio.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench.turns import ratios, spread, take_turns
from bench.yardsticks import duckdb_totals, plain_pass
from devstack.sample_csv import generate_csv, generate_export_csv
from services.csvstats import merge, sequential_totals, split, summarise
from services.csvstats.columnar import engine, summarise_chunk

COLUMN = "value"
CHUNKS = 8
SAMPLES = {"plain": generate_csv, "export": generate_export_csv}


def summarise_chunks(data: bytes) -> list:
    """Split, then summarise every chunk in this process with the stdlib core, then merge."""
    result = split(data, COLUMN, chunks=CHUNKS)
    return merge(
        result.plans,
        [
            summarise(
                [data[p.byte_start : p.byte_end]],
                column_index=result.column_index,
                column=COLUMN,
                record_start=p.record_start,
                first_line=p.first_line,
            )
            for p in result.plans
        ],
    )


def engine_chunks(data: bytes) -> list:
    """Split, then summarise every chunk in this process as the worker does, then merge."""
    result = split(data, COLUMN, chunks=CHUNKS)
    return merge(
        result.plans,
        [
            summarise_chunk(
                [data[p.byte_start : p.byte_end]],
                records=p.record_end - p.record_start,
                planned_sha256=p.sha256,
                column_index=result.column_index,
                column=COLUMN,
                record_start=p.record_start,
                first_line=p.first_line,
            )
            for p in result.plans
        ],
    )


def main(argv: list[str] | None = None) -> None:
    """Generate each sample, take the turns and print every turn and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--sample", choices=(*SAMPLES, "both"), default="both")
    args = parser.parse_args(argv)
    print("shared 2-core machine: compare ratios taken in the same turn, not seconds")
    for name in SAMPLES if args.sample == "both" else (args.sample,):
        data = SAMPLES[name](args.records)
        print(f"\n{name} sample: {args.records} records, {len(data) / 2**20:.1f} MiB")
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "sample.csv"
            path.write_bytes(data)
            compare(data, path, args.turns)


def compare(data: bytes, path: Path, turns: int) -> None:
    """Check every side gives the sequential control, then time them in turns."""
    control = sequential_totals(data, COLUMN)
    engine_name = "polars" if engine() is not None else "no engine: stdlib"
    sides = {
        "plain csv.reader pass": lambda: plain_pass(data, COLUMN),
        "DuckDB read_csv": lambda: duckdb_totals(path, COLUMN),
        f"split, {CHUNKS} chunks": lambda: split(data, COLUMN, chunks=CHUNKS),
        "split + stdlib summarise + merge": lambda: summarise_chunks(data),
        f"split + {engine_name} summarise + merge": lambda: engine_chunks(data),
    }
    for name, side in sides.items():
        result = side()
        if name != f"split, {CHUNKS} chunks" and result != control:
            raise SystemExit(f"{name} gives {result}, the sequential control {control}")
    seconds = take_turns(turns, sides)
    plain, duck = seconds["plain csv.reader pass"], seconds["DuckDB read_csv"]
    print(f"{'':36s} {'turns, wall s':>40s}  {'/ plain pass':>20s}  {'/ DuckDB':>20s}")
    for name, times in seconds.items():
        each = " ".join(f"{t:.2f}" for t in times)
        print(
            f"{name:36s} {each:>40s}  {spread(ratios(times, plain)):>20s}"
            f"  {spread(ratios(times, duck)):>20s}"
        )


if __name__ == "__main__":
    main()
