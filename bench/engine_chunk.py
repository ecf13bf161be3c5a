"""Time the compiled engine per chunk: this checkout's compiled_column against another revision's.

python -m bench.engine_chunk [--records 1000000] [--turns 5] [--against main]. Each sample
(plain and export) is split into 8 chunks; in every turn both versions of
services/csvstats/columnar.py summarise every chunk, alternating chunk by chunk; then this
checkout's steps are timed one by one. Every turn is printed, with the median and range per
chunk, and the turn-by-turn ratio. On a busy machine POLARS_MAX_THREADS=1 steadies the turns,
and --clock cpu times this process's CPU instead of the wall.
"""

from __future__ import annotations

import argparse
import hashlib
import time
import types
from collections.abc import Callable
from typing import Any

from bench.revisions import module_at
from bench.turns import ratios, spread
from devstack.sample_csv import generate_csv, generate_export_csv
from services.csvstats import columnar, split

CHUNKS = 8
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
SAMPLES = {"plain": generate_csv, "export": generate_export_csv}
Chunk = tuple[bytes, int, int, str]  # bytes, records, column index, planned digest


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


def paired_turns(
    sides: dict[str, types.ModuleType],
    chunks: list[Chunk],
    turns: int,
    clock: Callable[[], float],
) -> dict[str, list[float]]:
    """Each side's compiled_column over every chunk, per turn: the sides alternate chunk by
    chunk, and which goes first swaps every turn, so a burst of load on the shared machine
    falls on both; side name -> seconds over every chunk, per turn."""
    seconds = {name: [0.0] * turns for name in sides}
    for turn in range(turns):
        order = list(sides.items())[:: 1 if turn % 2 == 0 else -1]
        for c, records, index, sha in chunks:
            for name, module in order:
                started = clock()
                module.compiled_column(c, records, index, ",", sha)
                seconds[name][turn] += clock() - started
    return seconds


def step_turns(
    chunks: list[Chunk], turns: int, clock: Callable[[], float]
) -> dict[str, list[float]]:
    """This checkout's compiled_column cut into its steps, timed chunk by chunk in the order
    the function runs them; step name -> seconds over every chunk, per turn."""
    pl, np = columnar.engine()
    seconds: dict[str, list[float]] = {}

    def timed(turn: int, name: str, action: Callable[..., Any], *args: Any) -> Any:
        started = clock()
        result = action(*args)
        seconds.setdefault(name, [0.0] * turns)[turn] += clock() - started
        return result

    for turn in range(turns):
        for c, _, i, _ in chunks:
            timed(turn, "sha256", hashlib.sha256, c)
            timed(turn, "BOM (split-checked quotes)", columnar._same_records, c, b",", True)
            timed(turn, "record layout (numpy)", columnar.record_layout, np, c, b",")
            text = timed(turn, "read_csv, value column", columnar.read_column, pl, c, i, ",")
            values = timed(turn, "integers", columnar.integers, pl, text)
            timed(turn, "sum stays in int64", columnar.sum_stays_in_int64, pl, values)
            timed(turn, "cum_sum", values.cum_sum)
    return seconds


def main(argv: list[str] | None = None) -> None:
    """Check both versions agree, then take the turns and print every one."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--against", default="main")
    parser.add_argument(
        "--clock", choices=CLOCKS, default="wall", help="cpu: this process's CPU time, all threads"
    )
    args = parser.parse_args(argv)
    before = module_at(args.against, "services/csvstats/columnar.py")
    before.engine()
    pl, _ = columnar.engine()
    print(f"polars {pl.__version__}, {pl.thread_pool_size()} threads; {args.clock} ms per chunk")
    for name, generate in SAMPLES.items():
        chunks = chunks_of(generate(args.records))
        sides = {args.against: before, "this": columnar}
        for c, records, index, sha in chunks:
            old = before.compiled_column(c, records, index, ",", sha)
            new = columnar.compiled_column(c, records, index, ",", sha)
            if new is None or not old.values.equals(new.values):
                raise SystemExit(f"{name}: the two versions read a chunk differently")
        started = time.perf_counter()
        seconds = paired_turns(sides, chunks, args.turns, CLOCKS[args.clock])
        seconds.update(step_turns(chunks, args.turns, CLOCKS[args.clock]))
        print(f"\n{name} sample, {CHUNKS} chunks ({time.perf_counter() - started:.0f} s)")
        for side, times in seconds.items():
            each = " ".join(f"{1e3 * t / CHUNKS:.1f}" for t in times)
            per_chunk = spread([1e3 * t / CHUNKS for t in times], " ms", 1)
            print(f"{side:26s} {each:>36s}  {per_chunk}")
        ratio = spread(ratios(seconds["this"], seconds[args.against]))
        print(f"{'this / ' + args.against:26s} {ratio}")


if __name__ == "__main__":
    main()
