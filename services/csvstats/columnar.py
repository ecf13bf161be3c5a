"""Summarise a chunk with polars' compiled CSV reader where it reads the bytes as the core does.

polars and numpy are optional (the `fast` extra) and imported on first use, so importing this
module still loads only the standard library. polars reads the value column alone, and only
when cheap whole-buffer checks prove it splits the chunk into the same records as the core:
UTF-8, a one-byte delimiter, LF or CRLF terminators (no lone CR), well-placed quotes, the
expected number of records, each with as many fields as the first and none an empty line
(numpy counts every record's delimiters outside quotes: a projected read would pad a short
record or read a long one without a word). The quote walk is skipped when the chunk's digest
is that of a plan split() made: split rejected the file unless every quote in it was well
placed (but for one left open at its end, which the numpy count refuses), and digest-equal
bytes are those bytes. Every other chunk, every chunk with a value
that is not an int64, one whose running sum may leave int64, and a resumed checkpoint go to
the core's summarise, which stays the reference and decides every error.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from services.csvstats import bitmasks
from services.csvstats.model import Checkpoint, Summary
from services.csvstats.planning import validate_delimiter
from services.csvstats.summarising import summarise
from services.csvstats.syntax import BLANKS, QUOTE, quoted_field_walk, walk_to_special_fields

_BOM = b"\xef\xbb\xbf"
# Below this the int64 running sum of the values cannot wrap: the sum of their magnitudes,
# added in float64 (relative error far below 2**-10 for any chunk), bounds every prefix.
_SAFE_MAGNITUDE = float(2**62)
_EMPTY_LINE = re.compile(rb"\n\r?\n")
_LF, _CR = 0x0A, 0x0D


def summarise_chunk(
    blocks: Iterable[bytes],
    *,
    records: int,
    planned_sha256: str | None = None,
    verified: bool = False,
    column_index: int,
    column: str,
    delimiter: str = ",",
    record_start: int = 0,
    first_line: int = 2,
    checkpoint: Checkpoint | None = None,
    on_checkpoint: Callable[[Checkpoint], None] | None = None,
    checkpoint_every: int = 50_000,
) -> Summary:
    """Summarise a chunk of `records` records like summarise(), through polars when it can.

    planned_sha256 is the digest split() gave the chunk's plan, if the bytes come from one;
    verified if the blocks raise before they end unless they hash to it (the worker's read_input
    does), so that the engine need not hash them again. The checkpoints the core would pass to
    on_checkpoint are passed too, in order.
    """
    validate_delimiter(delimiter)
    core = functools.partial(
        summarise,
        column_index=column_index,
        column=column,
        delimiter=delimiter,
        record_start=record_start,
        first_line=first_line,
        checkpoint=checkpoint,
        on_checkpoint=on_checkpoint,
        checkpoint_every=checkpoint_every,
    )
    if engine() is None or checkpoint is not None or checkpoint_every < 1:
        return core(blocks)  # streamed: the chunk is never held whole
    data = b"".join(blocks)
    compiled = compiled_column(
        data, records, column_index, delimiter, planned_sha256, verified=verified
    )
    if compiled is None:
        return core([data])
    if on_checkpoint is not None:
        for done in range(checkpoint_every, records + 1, checkpoint_every):
            on_checkpoint(Checkpoint(done, compiled.summary(done, "")))
    return compiled.summary(records, compiled.digest)


@functools.cache
def engine() -> tuple[ModuleType, ModuleType] | None:
    """polars and numpy if both are installed, else None (the core does all the work)."""
    try:
        import numpy
        import polars
    except ImportError:
        return None
    return polars, numpy


@dataclass(frozen=True)
class CompiledColumn:
    """A chunk's column as polars read it: one int64 or null per record, and running sums."""

    values: Any  # polars.Series of Int64, null where the value is empty or blank
    prefix: Any  # their running sums, which the caller made sure cannot leave int64
    digest: str

    def summary(self, records: int, digest: str) -> Summary:
        """The Summary of the first `records` records."""
        values, prefix = self.values.head(records), self.prefix.head(records)
        count = values.count()
        return Summary(
            records=records,
            count=count,
            sum=values.sum() if count else 0,
            min=values.min() if count else None,
            max=values.max() if count else None,
            min_prefix=min(0, prefix.min()) if count else 0,
            max_prefix=max(0, prefix.max()) if count else 0,
            digest=digest,
        )


def compiled_column(
    data: bytes,
    records: int,
    column_index: int,
    delimiter: str,
    planned_sha256: str | None = None,
    *,
    verified: bool = False,
) -> CompiledColumn | None:
    """The chunk's column through polars, or None where it might differ from the core's;
    verified if the data are known to hash to planned_sha256."""
    engines = engine()
    separator = delimiter.encode()
    valid_index = isinstance(column_index, int) and column_index >= 0
    if engines is None or not valid_index or records < 1 or len(separator) != 1:
        return None
    pl, np = engines
    known = verified and planned_sha256
    digest = planned_sha256 if known else hashlib.sha256(data).hexdigest()
    if not _same_records(data, separator, split_checked=digest == planned_sha256):
        return None
    layout = record_layout(np, data, separator)
    if layout is None or layout.records != records or layout.width <= column_index:
        return None
    try:
        text = read_column(pl, data, column_index, delimiter)
        if text.len() != records:
            return None
        values = integers(pl, text)
        if not sum_stays_in_int64(pl, values):
            return None
        return CompiledColumn(values, values.cum_sum(), digest)
    except pl.exceptions.PolarsError:
        return None


def read_column(pl: ModuleType, data: bytes, column_index: int, delimiter: str) -> Any:
    """The column's fields, as strings, one per record as polars' CSV reader cuts them."""
    # Only the value column: polars still finds every record's end, quotes included, but
    # materialises one field per record.
    return pl.read_csv(
        data,
        has_header=False,
        separator=delimiter,
        quote_char='"',
        infer_schema=False,
        empty_string_is_null=False,
        columns=[column_index],
    ).to_series()


def integers(pl: ModuleType, text: Any) -> Any:
    """The values as int64, null where empty or blank; a PolarsError where one is not an
    integer as the core reads one."""
    # The cast reads exactly the spec's integers, [+-]?[0-9]+ within int64, and nothing else
    # (a test holds it to read_integer): no regular expression is needed, and only the values
    # it could not read (empty, blank, padded or bad) are stripped and cast again, strictly.
    values = text.cast(pl.Int64, strict=False)
    unread = values.is_null()
    if unread.any():
        at = unread.arg_true()
        stripped = text.gather(at).str.strip_chars(BLANKS).replace("", None)
        values = values.scatter(at, stripped.cast(pl.Int64, strict=True))
    return values


def sum_stays_in_int64(pl: ModuleType, values: Any) -> bool:
    """Whether no running sum of the values can leave int64: their magnitudes sum below 2**62."""
    count = values.count()
    # count x the largest magnitude bounds that sum exactly, in two reductions; only where the
    # bound is not below 2**62 are the magnitudes summed (in float64).
    bound = count * max(-values.min(), values.max()) if count else 0
    return bound < _SAFE_MAGNITUDE or values.cast(pl.Float64).abs().sum() < _SAFE_MAGNITUDE


@dataclass(frozen=True)
class RecordLayout:
    """How many records a chunk holds, each with `width` fields, none of them an empty line."""

    records: int
    width: int


def record_layout(np: ModuleType, data: bytes, separator: bytes) -> RecordLayout | None:
    """The chunk's layout if every record has as many fields as the first, no quote is left
    open and no CR stands alone, else None; the chunk's quotes must open and close fields only.

    A projected read pads a short record with an empty value and reads a long one without a
    word, so every record's delimiters outside quotes are counted here instead: bit masks of
    the quotes, delimiters and LFs, the quotes' running parity, and a check that each LF
    outside quotes ends a run of as many delimiters outside them as the first record holds.
    """
    array = np.frombuffer(data, np.uint8)
    quotes = bitmasks.flags(np, array, ord(QUOTE))
    if bitmasks.count(np, quotes) & 1:
        return None  # a quote left open to the end, which split() leaves to the core to name
    outside = ~bitmasks.prefix_parity(np, quotes)
    delimiters = bitmasks.flags(np, array, separator[0]) & outside
    lf = bitmasks.flags(np, array, _LF)
    # A lone CR ends a record for the core, not for polars (most chunks have no CR at all).
    if b"\r" in data and (bitmasks.flags(np, array, _CR) & ~bitmasks.shifted(np, lf, -1)).any():
        return None
    ends, total = lf & outside, bitmasks.count(np, delimiters)
    # The first record's delimiters: every one, if no LF outside quotes ends it.
    first_end = bitmasks.first(np, ends)
    per = total
    if first_end is not None:
        per = int(bitmasks.running_counts(np, delimiters, np.array([first_end]))[0])
    # The last record, if no LF ends it, holds the delimiters after the last LF.
    records = bitmasks.count(np, ends) + (not data.endswith(b"\n"))
    if total != records * per or not bitmasks.evenly_spaced(np, delimiters, ends, per):
        return None
    # An empty line is a record of one empty field, so only a width of 1 lets one through:
    # the core reads its empty value, polars might not.
    if per == 0 and (_EMPTY_LINE.search(data) or data.startswith((b"\n", b"\r\n"))):
        return None
    return RecordLayout(records, per + 1)


def _same_records(data: bytes, separator: bytes, split_checked: bool) -> bool:
    """Whether polars and the core cut these bytes into the same records, as far as their text
    and quotes tell (record_layout checks line breaks and widths); split_checked if split()
    already found them UTF-8 with well-placed quotes."""
    if data.startswith(_BOM) or not data:
        return False
    if not split_checked and not data.isascii():
        try:
            str(data, "utf-8")
        except UnicodeDecodeError:
            return False
    if split_checked or QUOTE not in data:
        return True
    # Quotes only open, close or are doubled inside fields, and none is left open; a byte the
    # delimiter is not stands for "special", so that the walk runs to the end in one match.
    rare = b"\x01" if separator == b"\x00" else b"\x00"
    spans = walk_to_special_fields(quoted_field_walk(separator, rare), data)
    return spans is not None and not (spans and spans[-1] == len(data))
