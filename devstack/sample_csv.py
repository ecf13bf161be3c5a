"""A deterministic sample CSV (header id,label,value,note) for the benchmark, demo and e2e tests.

The same arguments always give the same bytes: every choice comes from one seeded Random.
"""

from __future__ import annotations

import argparse
import random
import sys

HEADER = "id,label,value,note\n"
_WORDS = ("alpha", "bravo", "delta", "echo", "gold", "iron", "kilo", "lima", "nova", "oak")
_NOTES = ("ok", "late", "n/a", "spare", "done", "hold", "")
_BLANK_VALUES = ("", "", " ", "   ", "\t")


def generate_csv(
    records: int,
    seed: int = 7,
    *,
    empty_ratio: float = 0.03,
    quoted_multiline_ratio: float = 0.01,
    malformed_at: int | None = None,
) -> bytes:
    """Return `records` data records of CSV; malformed_at (1-based) gets the value 1.5."""
    rng = random.Random(seed)
    out = [HEADER]
    for record in range(1, records + 1):
        label, value = _label(rng), _value(rng, empty_ratio)
        if record == malformed_at:
            value = "1.5"
        out.append(f"{record},{label},{value},{_note(rng, quoted_multiline_ratio)}\n")
    return "".join(out).encode("utf-8")


def _value(rng: random.Random, empty_ratio: float) -> str:
    roll = rng.random()
    if roll < empty_ratio:
        return rng.choice(_BLANK_VALUES)
    roll = rng.random()
    if roll < 0.80:
        value = rng.randint(-999, 999)
    elif roll < 0.97:
        value = rng.randint(-99_999, 99_999)
    else:
        value = rng.randint(-(10**12), 10**12)
    return f" {value} " if roll > 0.995 else str(value)


def _label(rng: random.Random) -> str:
    roll = rng.random()
    word = _WORDS[int(roll * 1000) % len(_WORDS)]
    if roll < 0.03:
        return f'"{word}, {rng.choice(_WORDS)}"'  # a delimiter inside quotes
    if roll < 0.04:
        return f'"the ""{word}"" one"'  # doubled quotes
    return f"{word}{rng.randrange(100)}"


def _note(rng: random.Random, multiline_ratio: float) -> str:
    roll = rng.random()
    if roll < multiline_ratio:
        line_break = "\r\n" if roll < multiline_ratio / 2 else "\n"
        return f'"first line{line_break}second, ""quoted"" line"'
    return _NOTES[int(roll * 100) % len(_NOTES)]


def main(argv: list[str] | None = None) -> None:
    """Write a sample CSV to --out (or stdout)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--empty-ratio", type=float, default=0.03)
    parser.add_argument("--quoted-multiline-ratio", type=float, default=0.01)
    parser.add_argument(
        "--malformed-at", type=int, default=None, help="1-based data record whose value becomes 1.5"
    )
    parser.add_argument("--out", default="-", help="file to write, - for stdout")
    args = parser.parse_args(argv)
    data = generate_csv(
        args.records,
        args.seed,
        empty_ratio=args.empty_ratio,
        quoted_multiline_ratio=args.quoted_multiline_ratio,
        malformed_at=args.malformed_at,
    )
    if args.out == "-":
        sys.stdout.buffer.write(data)
    else:
        with open(args.out, "wb") as out:
            out.write(data)


if __name__ == "__main__":
    main()
