"""Deterministic sample CSVs for the benchmark, demo and e2e tests.

generate_csv (header id,label,value,note) has few quoted fields; generate_quoted_csv (header
id,name,value,comment) is shaped like real exports: a quarter of its text fields quoted, some
of those holding the delimiter, a line break and doubled quotes; generate_export_csv is the
same shape with such a field in about 30% of records (issue 41's benchmark sample). The same
arguments always give the same bytes: every choice comes from one seeded Random.
"""

from __future__ import annotations

import argparse
import random
import sys

HEADER = "id,label,value,note\n"
_WORDS = ("alpha", "bravo", "delta", "echo", "gold", "iron", "kilo", "lima", "nova", "oak")
_NOTES = ("ok", "late", "n/a", "spare", "done", "hold", "")
_BLANK_VALUES = ("", "", " ", "   ", "\t")
QUOTED_HEADER = "id,name,value,comment\n"
_NAMES = ("ada", "bo", "cyd", "dee", "eli", "fay", "gus", "hal", "ivy", "jo", "kai", "lu")
_SURNAMES = ("hill", "moreau", "nakamura", "osei", "kowalski", "silva", "berg", "ng")
_COMMENTS = (
    "ok",
    "late delivery",
    "n/a",
    "spare part ordered",
    "done",
    "on hold until monday",
    "to be checked",
    "re-run by night shift",
    "awaiting reply from the supplier",
    "",
)
# Shares of the quote-heavy sample: text fields that are quoted, quoted fields that hold the
# delimiter, a line break and doubled quotes; values padded with blanks, quoted, empty.
QUOTED_FIELD_RATIO = 0.25
QUOTED_SPECIAL_RATIO = 0.15
PADDED_VALUE_RATIO = 0.05
QUOTED_VALUE_RATIO = 0.05
EMPTY_VALUE_RATIO = 0.05
# Share of records in generate_export_csv with one quoted field holding the delimiter, a line
# break and doubled quotes.
EXPORT_MULTILINE_RATIO = 0.30


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


def generate_quoted_csv(records: int, seed: int = 7) -> bytes:
    """Return `records` data records shaped like a real export, quote-heavy and multiline."""
    rng = random.Random(seed)
    random_ = rng.random
    out = [QUOTED_HEADER]
    for record in range(1, records + 1):
        name = _quoted_text(rng, f"{_NAMES[int(random_() * 12)]} {_SURNAMES[int(random_() * 8)]}")
        comment = _quoted_text(rng, _COMMENTS[int(random_() * 10)])
        out.append(f"{record},{name},{_quoted_sample_value(rng)},{comment}\n")
    return "".join(out).encode("utf-8")


def generate_export_csv(records: int, seed: int = 7) -> bytes:
    """Return `records` data records of the quote-heavy shape, about 30% of them multiline."""
    rng = random.Random(seed)
    random_ = rng.random
    out = [QUOTED_HEADER]
    for record in range(1, records + 1):
        name = f"{_NAMES[int(random_() * 12)]} {_SURNAMES[int(random_() * 8)]}"
        comment = _COMMENTS[int(random_() * 10)]
        roll = random_()
        if roll < EXPORT_MULTILINE_RATIO:
            line_break = "\r\n" if roll < EXPORT_MULTILINE_RATIO / 2 else "\n"
            name, comment = _special(rng, name, line_break), _plain_text(rng, comment)
        else:
            name, comment = _plain_text(rng, name), _plain_text(rng, comment)
        out.append(f"{record},{name},{_quoted_sample_value(rng)},{comment}\n")
    return "".join(out).encode("utf-8")


def _plain_text(rng: random.Random, word: str) -> str:
    return f'"{word}"' if rng.random() < QUOTED_FIELD_RATIO else word


def _special(rng: random.Random, word: str, line_break: str) -> str:
    return f'"{word}, ""{rng.choice(_NAMES)}""{line_break}x"'


def _quoted_text(rng: random.Random, word: str) -> str:
    roll = rng.random()
    if roll >= QUOTED_FIELD_RATIO:
        return word
    if roll < QUOTED_FIELD_RATIO * QUOTED_SPECIAL_RATIO:
        line_break = "\r\n" if roll < QUOTED_FIELD_RATIO * QUOTED_SPECIAL_RATIO / 2 else "\n"
        return _special(rng, word, line_break)
    return f'"{word}"'


def _quoted_sample_value(rng: random.Random) -> str:
    roll = rng.random()
    if roll < EMPTY_VALUE_RATIO:
        return rng.choice(_BLANK_VALUES)
    value = rng.randint(-99_999, 99_999) if roll < 0.99 else rng.randint(-(10**12), 10**12)
    roll = rng.random()
    if roll < PADDED_VALUE_RATIO:
        return f" {value} " if roll < PADDED_VALUE_RATIO / 2 else f"\t{value}"
    if roll < PADDED_VALUE_RATIO + QUOTED_VALUE_RATIO:
        return f'"{value}"'
    return str(value)


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
    parser.add_argument(
        "--shape",
        choices=("plain", "quoted", "export"),
        default="plain",
        help="quoted: the quote-heavy one; export: quote-heavy with 30%% multiline records",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--empty-ratio", type=float, default=0.03)
    parser.add_argument("--quoted-multiline-ratio", type=float, default=0.01)
    parser.add_argument(
        "--malformed-at", type=int, default=None, help="1-based data record whose value becomes 1.5"
    )
    parser.add_argument("--out", default="-", help="file to write, - for stdout")
    args = parser.parse_args(argv)
    if args.shape == "quoted":
        data = generate_quoted_csv(args.records, args.seed)
    elif args.shape == "export":
        data = generate_export_csv(args.records, args.seed)
    else:
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
