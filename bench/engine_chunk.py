"""Time the compiled engine per chunk: this checkout's compiled_column against another revision's.

python -m bench.engine_chunk [--records 1000000] [--turns 5] [--against main]. Each sample
(plain and export) is split into 8 chunks; every turn runs both versions of
services/csvstats/columnar.py over every chunk, one after the other, then times this
checkout's steps one by one. Every turn is printed, with the median and range per chunk.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

from bench.turns import ratios, spread, take_turns
from devstack.sample_csv import generate_csv, generate_export_csv
from services.csvstats import columnar, split
from services.csvstats.syntax import BLANKS

CHUNKS = 8
SAMPLES = {"plain": generate_csv, "export": generate_export_csv}
Chunk = tuple[bytes, int, int, str]  # bytes, records, column index, planned digest


def columnar_at(revision: str) -> types.ModuleType:
    """services/csvstats/columnar.py as it is at a git revision, loaded as a module."""
    root = Path(__file__).resolve().parents[1]
    source = subprocess.run(
        ["git", "show", f"{revision}:services/csvstats/columnar.py"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    module = types.ModuleType(f"columnar_at_{revision}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{revision}:columnar.py", "exec"), module.__dict__)
    return module


def chunks_of(data: bytes) -> list[Chunk]:
    """The sample's planned chunks as the worker gets them."""
    result = split(data, "value", chunks=CHUNKS)
    return [
        (
            data[p.byte_start : p.byte_end],
            p.record_end - p.record_start,
            result.column_index,
            p.sha256,
        )
        for p in result.plans
    ]


def every_chunk(module: types.ModuleType, chunks: list[Chunk]) -> Callable[[], list]:
    """Run a columnar module's compiled_column over every chunk."""
    return lambda: [module.compiled_column(c, n, i, ",", sha) for c, n, i, sha in chunks]


def steps(chunks: list[Chunk]) -> dict[str, Callable[[], object]]:
    """This checkout's compiled_column cut into its steps, each over every chunk."""
    pl, np = columnar.engine()
    texts, values = [], []

    def read_column() -> None:
        texts[:] = [
            pl.read_csv(
                c, has_header=False, infer_schema=False, empty_string_is_null=False, columns=[i]
            ).to_series()
            for c, _, i, _ in chunks
        ]

    def integers() -> None:
        values.clear()
        for text in texts:
            text = text.str.strip_chars(BLANKS).replace("", None)
            values.append(text.cast(pl.Int64, strict=True))

    def sums() -> None:
        for value in values:
            value.cast(pl.Float64).abs().sum()
            value.cum_sum()

    return {
        "sha256": lambda: [hashlib.sha256(c).hexdigest() for c, *_ in chunks],
        "BOM, lone CR": lambda: [columnar._same_records(c, b",", True) for c, *_ in chunks],
        "record layout (numpy)": lambda: [columnar.record_layout(np, c, b",") for c, *_ in chunks],
        "read_csv, value column": read_column,
        "strip, cast": integers,
        "magnitude sum, cum_sum": sums,
    }


def main(argv: list[str] | None = None) -> None:
    """Check both versions agree, then take the turns and print every one."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--against", default="main")
    args = parser.parse_args(argv)
    before = columnar_at(args.against)
    before.engine()
    pl, _ = columnar.engine()
    print(f"polars {pl.__version__}, {pl.thread_pool_size()} threads; ms per chunk")
    for name, generate in SAMPLES.items():
        chunks = chunks_of(generate(args.records))
        sides = {args.against: every_chunk(before, chunks), "this": every_chunk(columnar, chunks)}
        for old, new in zip(sides[args.against](), sides["this"](), strict=True):
            if new is None or not old.values.equals(new.values):
                raise SystemExit(f"{name}: the two versions read a chunk differently")
        started = time.perf_counter()
        seconds = take_turns(args.turns, sides)
        seconds.update(take_turns(args.turns, steps(chunks)))
        print(f"\n{name} sample, {CHUNKS} chunks ({time.perf_counter() - started:.0f} s)")
        for side, times in seconds.items():
            each = " ".join(f"{1e3 * t / CHUNKS:.1f}" for t in times)
            per_chunk = spread([1e3 * t / CHUNKS for t in times], " ms", 1)
            print(f"{side:26s} {each:>36s}  {per_chunk}")
        ratio = spread(ratios(seconds["this"], seconds[args.against]))
        print(f"{'this / ' + args.against:26s} {ratio}")


if __name__ == "__main__":
    main()
