"""RFC 4180 record syntax, done with whole-buffer operations wherever the data allows.

Record terminators are LF, CRLF and a lone CR outside quotes (csv.reader reads a lone CR the
same way); inside quotes they are field content. A quote may only open a field, close it, or
be doubled inside it; any other quote is misplaced.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from itertools import repeat

from services.csvstats.model import INT64_MAX, INT64_MIN

QUOTE = b'"'
# "Empty" values may be padded with these; int() would accept much more (e.g. \x0c, U+3000).
BLANKS = " \t"
_INTEGER = re.compile(r"[+-]?[0-9]+")  # [0-9], not \d: \d matches non-ASCII digits
_INT64_DIGITS = 19
_EXCERPT_CHARS = 40
_NEXT_SPECIAL = re.compile(rb'["\r\n]')
_COUNT_BLOCK = 1 << 16
_LONE_CR = re.compile(rb"\r(?!\n)")


@functools.lru_cache(maxsize=32)
def quoted_field_walk(delimiter: bytes, special: bytes) -> re.Pattern:
    """A pattern that matches from a record boundary up to and including the next quoted field
    holding any of the special bytes (group 1 is its content), or else as far as quotes are
    well placed: each opens a field (after a separator or at the start), closes it (before a
    separator or at the end) or is doubled inside it. A field left open at the end matches
    as a special one, with no closing quote after its content.
    """
    d = re.escape(delimiter)
    if len(delimiter) == 1:  # one lookaround on a class is much faster than an alternation
        opens = rb"(?<![^" + d + rb'\r\n])"'
        closes = rb'"(?![^' + d + rb"\r\n])"
    else:
        opens = rb"(?:(?<=" + d + rb')|(?<![^\r\n]))"'
        closes = rb'"(?=' + d + rb"|[\r\n]|\Z)"
    plain = rb'[^"' + b"".join(map(re.escape, map(bytes, zip(special)))) + rb"]*+"
    plain_field = opens + plain + rb'(?:""' + plain + rb")*+" + closes
    any_field = opens + rb'([^"]*+(?:""[^"]*+)*+)(?:' + closes + rb"|\Z)"
    # Possessive throughout, so the engine never backtracks; and one repeated group with no
    # alternation inside, which keeps the engine on its fast path (about 3x faster).
    return re.compile(rb'[^"]*+(?:' + plain_field + rb'[^"]*+)*+(?:' + any_field + rb")?")


def walk_to_special_fields(walk: re.Pattern, buf) -> list[int] | None:
    """Return [start, end, start, end, ...] of the contents of buf's quoted fields that hold
    a special byte of the walk (and of one left open at the end); None if a quote is
    misplaced."""
    match = walk.match
    end, spans, pos = len(buf), [], 0
    while True:
        step = match(buf, pos)
        content_start, content_end = step.span(1)
        if content_start < 0:
            return spans if step.end() == end else None
        spans += (content_start, content_end)
        pos = step.end()
        if pos == end:
            return spans


def quotes_well_placed(pieces: list, separators: tuple) -> bool:
    """Whether every quote between the pieces of data.split(quote) is allowed by RFC 4180.

    Even-numbered pieces lie outside quotes. A non-empty one must end with a separator
    before an opening quote and start with one after a closing quote; an empty one between
    two quotes is a doubled quote inside a field.
    """
    first = pieces[0]
    if first and not first.endswith(separators):
        return False
    if len(pieces) % 2 and len(pieces) > 1:
        last = pieces[-1]
        if last and not last.startswith(separators):
            return False
    # A set, because files repeat the same few pieces (",", "\n") many times.
    middle = set(pieces[2:-1:2])
    middle.discard(first[:0])
    kind = type(first)
    return all(map(kind.startswith, middle, repeat(separators))) and all(
        map(kind.endswith, middle, repeat(separators))
    )


def mask_quoted(pieces: list[bytes], table: bytes) -> bytes:
    """Join data.split(quote) back, with every quoted piece translated through table."""
    pieces[1::2] = map(bytes.translate, pieces[1::2], repeat(table))
    return QUOTE.join(pieces)


def first_misplaced_quote(pieces: list, separators: tuple) -> int | None:
    """Return the offset of the first misplaced quote among the pieces of data.split(quote)
    (even-numbered pieces lie outside quotes), or None."""
    offset = 0
    last = len(pieces) - 1
    for i, piece in enumerate(pieces):
        if i % 2 == 0 and piece:
            if i > 0 and not piece.startswith(separators):
                return offset - 1
            if i < last and not piece.endswith(separators):
                return offset + len(piece)
        offset += len(piece) + 1
    return None


def line_breaks(buf: bytes, start: int = 0, end: int | None = None) -> int:
    """Count physical line breaks (LF, CRLF or lone CR) in buf[start:end]."""
    end = len(buf) if end is None else end
    lf = buf.count(b"\n", start, end)
    if buf.find(b"\r", start, end) < 0:
        return lf
    return lf + buf.count(b"\r", start, end) - buf.count(b"\r\n", start, end)


def terminator_view(buf: bytes) -> bytes:
    """Return bytes as long as buf in which each line break (LF, CRLF or a lone CR), and
    nothing else, ends in LF: a CRLF keeps its LF and a lone CR becomes one."""
    # One search for a lone CR, rather than counting CRs and CRLFs (a third of the time).
    if _LONE_CR.search(buf) is None:
        return buf
    return buf.replace(b"\r\n", b"\x00\n").replace(b"\r", b"\n")


def offset_after_lines(view: bytes, start: int, n: int) -> int:
    """Return the offset just past the n-th LF at or after start (n >= 1); -1 if too few."""
    # Counting (memchr speed) over blocks, then bisecting the block, keeps this C-speed.
    pos, size = start, len(view)
    while True:
        end = min(pos + _COUNT_BLOCK, size)
        found = view.count(b"\n", pos, end)
        if found >= n:
            break
        if end == size:
            return -1
        n -= found
        pos = end
    while end - pos > 256:
        mid = (pos + end) // 2
        found = view.count(b"\n", pos, mid)
        if found >= n:
            end = mid
        else:
            n -= found
            pos = mid
    for _ in range(n):
        pos = view.index(b"\n", pos, end) + 1
    return pos


def last_record_end(buf: bytes | bytearray) -> int:
    """Return the offset just past the last complete record of buf, which starts at one.

    A final CR is held back: the LF that would make it a CRLF may be in the next block.
    """
    stop = len(buf) - 1 if buf.endswith(b"\r") else len(buf)
    quotes = buf.count(QUOTE, 0, stop)
    end = stop
    while True:
        terminator = max(buf.rfind(b"\n", 0, end), buf.rfind(b"\r", 0, end))
        if terminator < 0:
            return 0
        if (quotes - buf.count(QUOTE, terminator, stop)) % 2 == 0:
            return terminator + 1
        # Inside a quoted field: look before the quote that opened it.
        end = buf.rfind(QUOTE, 0, terminator)
        if end < 0:
            return 0


def iter_records(batch: bytes) -> Iterator[tuple[int, int, int]]:
    """Yield (start, content_end, end) of each record of batch; content_end omits the terminator.

    A quote left open runs the record to the end of batch.
    """
    pos, size = 0, len(batch)
    while pos < size:
        start, cursor = pos, pos
        while True:
            found = _NEXT_SPECIAL.search(batch, cursor)
            if found is None:
                yield start, size, size
                return
            at = found.start()
            if batch[at] == 0x22:
                closing = batch.find(QUOTE, at + 1)
                if closing < 0:
                    yield start, size, size
                    return
                cursor = closing + 1
                continue
            pos = at + 2 if batch.startswith(b"\r\n", at) else at + 1
            yield start, at, pos
            break


def record_fields(text: str, delimiter: str) -> list[str]:
    """Split one record (no terminator, quotes well placed) into its field values."""
    if '"' not in text:
        return text.split(delimiter)
    pieces = text.split('"')
    fields = [""]
    last = len(pieces) - 1
    for i, piece in enumerate(pieces):
        if i % 2:
            fields[-1] += piece
        elif piece:
            parts = piece.split(delimiter)
            fields[-1] += parts[0]
            fields.extend(parts[1:])
        elif 0 < i < last:
            fields[-1] += '"'
    return fields


def too_few_fields(fields: int, column_index: int) -> str:
    """Return the reason for a record that ends before the column."""
    return f"too few fields ({fields}; the column is field {column_index + 1})"


class BadValue(Exception):
    """A field that is neither empty nor a base-10 int64; the message is the reason."""


def read_integer(raw: str) -> int | None:
    """Return the field's integer, None if it is empty or blank, or raise BadValue."""
    text = raw.strip(BLANKS)
    if not text:
        return None
    if not _INTEGER.fullmatch(text):
        raise BadValue("not an integer")
    # Checked before int() so a 5,000-digit value is "out of range", not int()'s digit limit.
    if len(text.lstrip("+-").lstrip("0")) > _INT64_DIGITS:
        raise BadValue("out of int64 range")
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise BadValue("out of int64 range")
    return value


def excerpt(value: str | bytes) -> str:
    """Return repr(value), shortened with '...' to about 40 characters."""
    shown = repr(value)
    if len(shown) <= _EXCERPT_CHARS:
        return shown
    keep = _EXCERPT_CHARS
    while len(repr(value[:keep])) > _EXCERPT_CHARS - 3:
        keep -= 1
    return repr(value[:keep]) + "..."
