"""Check a submitted CSV file and plan its chunks of whole records."""

from __future__ import annotations

import codecs
import hashlib
from bisect import bisect_right
from dataclasses import dataclass
from itertools import repeat

from services.csvstats.errors import CsvFormatError
from services.csvstats.model import ChunkPlan, SplitResult
from services.csvstats.syntax import (
    QUOTE,
    first_misplaced_quote,
    line_breaks,
    offset_after_lines,
    record_fields,
    terminator_view,
)

MAX_CHUNKS = 64
_UTF8_STEP = 1 << 20
_QUOTE_SCAN_STEP = 1 << 16
# Hides line breaks inside quotes, so that only terminators are left as CR or LF.
_HIDE_LINE_BREAKS = bytes.maketrans(b"\r\n", b"\x00\x00")


def validate_delimiter(delimiter: str) -> None:
    """Raise CsvFormatError unless delimiter is one character other than a quote, CR or LF."""
    if not isinstance(delimiter, str) or len(delimiter) != 1:
        raise CsvFormatError("delimiter", "must be exactly one character")
    if delimiter in '"\r\n':
        raise CsvFormatError("delimiter", "cannot be a quote, CR or LF")


def validate_chunks(chunks: int) -> None:
    """Raise CsvFormatError unless chunks is an integer from 1 to MAX_CHUNKS."""
    if not isinstance(chunks, int) or isinstance(chunks, bool) or not 1 <= chunks <= MAX_CHUNKS:
        raise CsvFormatError("chunks", f"must be an integer from 1 to {MAX_CHUNKS}")


@dataclass(frozen=True)
class FileLayout:
    """Where a checked file's header and records are.

    terminators is as long as the file: each record terminator in it ends with LF and nothing
    else is LF. The line breaks inside quoted fields are counted per section of the file, so
    that a record's line number takes a count over one section rather than over the file.
    """

    header: tuple[str, ...]
    body_start: int
    records: int
    terminators: bytes
    section_starts: tuple[int, ...]
    # Line breaks inside quotes before each section, and then in the whole file.
    quoted_breaks_before: tuple[int, ...]

    def line_of(self, data: bytes, record: int, offset: int) -> int:
        """The physical line of data record `record` (from 0), which starts at offset."""
        # Before it: the header's terminator (if it has one) and one per record.
        terminators_before = record + self.terminators.endswith(b"\n", 0, self.body_start)
        quoted = 0
        if self.quoted_breaks_before[-1]:
            i = bisect_right(self.section_starts, offset) - 1
            start = self.section_starts[i]
            quoted = (
                self.quoted_breaks_before[i]
                + line_breaks(data, start, offset)
                - self.terminators.count(b"\n", start, offset)
            )
        return 1 + terminators_before + quoted


def scan_file(data: bytes, delimiter: str) -> FileLayout:
    """Check the file is UTF-8 with well-placed quotes and a header; find its records."""
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    if start == len(data):
        raise CsvFormatError("file", "is empty: its first record must be the header")
    _check_utf8(data, start)
    separators = (delimiter.encode(), b"\r", b"\n")
    scanned = _hide_quoted_line_breaks(data, start, separators)
    if scanned is None:
        pieces = data[start:].split(QUOTE)
        line = _line_at(data, start + first_misplaced_quote(pieces, separators))
        raise CsvFormatError(
            "file",
            f"line {line}: misplaced quote (RFC 4180 allows quotes only around"
            " a whole field, and doubled inside one)",
        )
    masked, section_starts, quoted_breaks_before = scanned
    terminators = terminator_view(masked)
    newline = terminators.find(b"\n", start)
    body_start = len(data) if newline < 0 else newline + 1
    header = _read_header(data, start, newline, delimiter)
    records = terminators.count(b"\n", body_start)
    if body_start < len(data) and not terminators.endswith(b"\n"):
        records += 1  # the final newline is optional
    return FileLayout(
        header, body_start, records, terminators, section_starts, quoted_breaks_before
    )


def find_column(header: tuple[str, ...], column: str) -> int:
    """Return the index of the one header field named column, else raise CsvFormatError."""
    if not isinstance(column, str) or not column:
        raise CsvFormatError("column", "must be a non-empty header name")
    found = [i for i, name in enumerate(header) if name == column]
    if not found:
        names = ", ".join(map(repr, header[:20])) + (", ..." if len(header) > 20 else "")
        raise CsvFormatError("column", f"{column!r} is not in the header ({names})")
    if len(found) > 1:
        positions = ", ".join(str(i + 1) for i in found)
        raise CsvFormatError("column", f"{column!r} is ambiguous: header fields {positions}")
    return found[0]


def split(data: bytes, column: str, delimiter: str = ",", chunks: int = 1) -> SplitResult:
    """Check a CSV file and plan up to `chunks` chunks of equally many records."""
    validate_delimiter(delimiter)
    validate_chunks(chunks)
    data = bytes(data)
    layout = scan_file(data, delimiter)
    column_index = find_column(layout.header, column)
    size = max(1, -(-layout.records // chunks))
    count = max(1, -(-layout.records // size))
    view = memoryview(data)
    plans = []
    byte_start = layout.body_start
    for index in range(count):
        record_start = index * size
        last = index == count - 1
        byte_end = len(data) if last else offset_after_lines(layout.terminators, byte_start, size)
        plans.append(
            ChunkPlan(
                index=index,
                record_start=record_start,
                record_end=min(layout.records, record_start + size),
                first_line=layout.line_of(data, record_start, byte_start),
                byte_start=byte_start,
                byte_end=byte_end,
                sha256=hashlib.sha256(view[byte_start:byte_end]).hexdigest(),
            )
        )
        byte_start = byte_end
    return SplitResult(
        header=layout.header, column_index=column_index, records=layout.records, plans=tuple(plans)
    )


def _hide_quoted_line_breaks(
    data: bytes, start: int, separators: tuple
) -> tuple[bytes, tuple[int, ...], tuple[int, ...]] | None:
    """Return data with the CR and LF bytes inside quotes hidden, where each section starts
    and how many line breaks quotes hold before it (then in all); None if a quote is misplaced.

    Works through sections cut at quotes, so that a quote-heavy file's millions of pieces are
    handled a cache-sized section at a time.
    """
    if data.find(QUOTE, start) < 0:
        return data, (start,), (0, 0)
    blocks, starts, breaks_before = [], [], [0]
    at, inside = start, 0  # inside: whether the block's first piece is within quotes
    while True:
        cut = data.find(QUOTE, at + _QUOTE_SCAN_STEP)
        last = cut < 0
        block = data[at : len(data) if last else cut]
        pieces = block.split(QUOTE)
        outside = pieces[inside::2]
        # A non-empty piece outside quotes must follow a closing quote with a separator
        # (unless it starts the file) and precede an opening quote with one (unless it ends it).
        after_quote = set(outside[1:] if at == start else outside)
        ends_outside = (len(pieces) - 1 - inside) % 2 == 0
        before_quote = set(outside[:-1] if last and ends_outside else outside)
        after_quote.discard(b"")
        before_quote.discard(b"")
        if not (
            all(map(bytes.startswith, after_quote, repeat(separators)))
            and all(map(bytes.endswith, before_quote, repeat(separators)))
        ):
            return None
        quoted = QUOTE.join(pieces[1 - inside :: 2])
        hidden = line_breaks(quoted) if b"\n" in quoted or b"\r" in quoted else 0
        if hidden:
            pieces[1 - inside :: 2] = map(
                bytes.translate, pieces[1 - inside :: 2], repeat(_HIDE_LINE_BREAKS)
            )
            block = QUOTE.join(pieces)
        blocks.append(block)
        starts.append(at)
        breaks_before.append(breaks_before[-1] + hidden)
        if last:
            break
        inside = (inside + len(pieces)) % 2
        at = cut + 1
    # Without a multiline field every line break is already a terminator.
    masked = data[:start] + QUOTE.join(blocks) if breaks_before[-1] else data
    return masked, tuple(starts), tuple(breaks_before)


def _line_at(data: bytes, offset: int) -> int:
    """The physical line of a byte (only for error messages: it counts from the start)."""
    return 1 + line_breaks(data, 0, offset)


def _check_utf8(data: bytes, start: int) -> None:
    if data.isascii():
        return
    pos = start
    while pos < len(data):
        end = min(pos + _UTF8_STEP, len(data))
        # Never cut a character: back off over continuation bytes (0b10xxxxxx).
        while end < len(data) and end > pos + 4 and 0x80 <= data[end] < 0xC0:
            end -= 1
        try:
            str(data[pos:end], "utf-8")
        except UnicodeDecodeError as exc:
            offset = pos + exc.start
            raise CsvFormatError(
                "file",
                f"is not UTF-8: byte {offset} (line {_line_at(data, offset)})"
                f" is {data[offset : offset + 1]!r}",
            ) from None
        pos = end


def _read_header(data: bytes, start: int, newline: int, delimiter: str) -> tuple[str, ...]:
    if newline < 0:
        end = len(data)
        if data.count(QUOTE, start) % 2:
            raise CsvFormatError("file", "the header has an unterminated quote")
    elif data[newline] == 0x0A and newline > start and data[newline - 1] == 0x0D:
        end = newline - 1
    else:
        end = newline
    text = data[start:end].decode("utf-8")
    if not text:
        raise CsvFormatError("file", "the header (line 1) is empty")
    return tuple(record_fields(text, delimiter))
