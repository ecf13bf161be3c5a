"""Check a submitted CSV file and plan its chunks of whole records."""

from __future__ import annotations

import codecs
import hashlib
from bisect import bisect_right
from dataclasses import dataclass, replace
from itertools import accumulate, repeat

from services.csvstats import vectorized
from services.csvstats.errors import CsvFormatError
from services.csvstats.model import ChunkPlan, SplitResult
from services.csvstats.parity import plan_by_parity
from services.csvstats.syntax import (
    QUOTE,
    first_misplaced_quote,
    line_breaks,
    offset_after_lines,
    quoted_field_walk,
    record_fields,
    terminator_view,
    walk_to_special_fields,
)

MAX_CHUNKS = 64
_UTF8_STEP = 1 << 20


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

    terminators is as long as the file, and each physical line break in it ends with LF and
    nothing else is LF; the breaks inside the multiline quoted fields (given by where their
    contents start and end, in file order) are not record terminators.
    """

    header: tuple[str, ...]
    body_start: int
    records: int
    terminators: bytes
    multiline_starts: tuple[int, ...]
    multiline_ends: tuple[int, ...]
    # Line breaks inside the first i multiline fields, for i from 0 to all of them.
    quoted_breaks_before: tuple[int, ...]

    def line_of(self, record: int, offset: int) -> int:
        """The physical line of data record `record` (from 0), which starts at offset."""
        # Before it: the header's terminator (if it has one) and one per record.
        terminators_before = record + (self.body_start > 0 and self._ends_record(self.body_start))
        quoted = self.quoted_breaks_before[bisect_right(self.multiline_starts, offset)]
        return 1 + terminators_before + quoted

    def offset_after_records(self, start: int, records: int) -> int:
        """The offset just past the records-th record terminator at or after start."""
        pos = start
        while True:
            end = offset_after_lines(self.terminators, pos, records)
            if end < 0:
                return len(self.terminators)
            # The breaks inside quotes among those lines leave that many records to go.
            records = self._quoted_breaks_until(end) - self._quoted_breaks_until(pos)
            if not records:
                return end
            pos = end

    def _quoted_breaks_until(self, offset: int) -> int:
        """Line breaks inside quoted fields before offset."""
        i = bisect_right(self.multiline_starts, offset) - 1
        if i < 0:
            return 0
        inside = self.terminators.count(
            b"\n", self.multiline_starts[i], min(offset, self.multiline_ends[i])
        )
        return self.quoted_breaks_before[i] + inside

    def _ends_record(self, offset: int) -> bool:
        """Whether the byte before offset is a record terminator's LF."""
        if not self.terminators.endswith(b"\n", 0, offset):
            return False
        return self._quoted_breaks_until(offset) == self._quoted_breaks_until(offset - 1)


def scan_file(data: bytes, delimiter: str) -> FileLayout:
    """Check the file is UTF-8 with well-placed quotes and a header; find its records."""
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    if start == len(data):
        raise CsvFormatError("file", "is empty: its first record must be the header")
    _check_utf8(data, start)
    spans = _multiline_fields(data, start, delimiter) if data.find(QUOTE, start) >= 0 else []
    if spans is None:
        separators = (delimiter.encode(), b"\r", b"\n")
        pieces = data[start:].split(QUOTE)
        line = _line_at(data, start + first_misplaced_quote(pieces, separators))
        raise CsvFormatError(
            "file",
            f"line {line}: misplaced quote (RFC 4180 allows quotes only around"
            " a whole field, and doubled inside one)",
        )
    terminators = terminator_view(data)
    starts, ends = tuple(spans[::2]), tuple(spans[1::2])
    breaks = map(terminators.count, repeat(b"\n"), starts, ends)
    layout = FileLayout((), 0, 0, terminators, starts, ends, tuple(accumulate(breaks, initial=0)))
    newline = layout.offset_after_records(start, 1) - 1
    if newline == len(data) - 1 and not layout._ends_record(len(data)):
        newline = -1
    body_start = len(data) if newline < 0 else newline + 1
    header = _read_header(data, start, newline, delimiter)
    records = terminators.count(b"\n", body_start) - (
        layout.quoted_breaks_before[-1] - layout._quoted_breaks_until(body_start)
    )
    if body_start < len(data) and not layout._ends_record(len(data)):
        records += 1  # the final newline is optional
    return replace(layout, header=header, body_start=body_start, records=records)


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


def split(data, column: str, delimiter: str = ",", chunks: int = 1) -> SplitResult:
    """Check a CSV file (bytes or a memory map) and plan up to `chunks` chunks of equally
    many records: by quote parity (in numpy where it is installed), or by the exact scan
    where that declines."""
    validate_delimiter(delimiter)
    validate_chunks(chunks)
    # The two decline on the same files (tests/unit/test_csvstats_vectorized.py): one pass.
    plan = vectorized.plan_by_vectors if vectorized.engine() is not None else plan_by_parity
    planned = plan(data, delimiter, chunks)
    if planned is None:
        return split_exactly(bytes(data), column, delimiter, chunks)
    records = planned.records
    header_end = len(data) if planned.header_newline < 0 else planned.header_newline + 1
    header = _read_header(
        bytes(data[:header_end]), planned.header_start, planned.header_newline, delimiter
    )
    column_index = find_column(header, column)
    size = max(1, -(-records // chunks))
    plans = tuple(
        ChunkPlan(
            index=index,
            record_start=index * size,
            record_end=min(records, (index + 1) * size),
            first_line=first_line,
            byte_start=byte_start,
            byte_end=byte_end,
            sha256=digest,
        )
        for index, ((byte_start, byte_end, first_line), digest) in enumerate(
            zip(planned.ranges, planned.digests, strict=True)
        )
    )
    return SplitResult(header=header, column_index=column_index, records=records, plans=plans)


def split_exactly(data: bytes, column: str, delimiter: str = ",", chunks: int = 1) -> SplitResult:
    """split() by the exact scan, which walks every multiline field and names any error."""
    validate_delimiter(delimiter)
    validate_chunks(chunks)
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
        byte_end = len(data) if last else layout.offset_after_records(byte_start, size)
        plans.append(
            ChunkPlan(
                index=index,
                record_start=record_start,
                record_end=min(layout.records, record_start + size),
                first_line=layout.line_of(record_start, byte_start),
                byte_start=byte_start,
                byte_end=byte_end,
                sha256=hashlib.sha256(view[byte_start:byte_end]).hexdigest(),
            )
        )
        byte_start = byte_end
    return SplitResult(
        header=layout.header, column_index=column_index, records=layout.records, plans=tuple(plans)
    )


def _multiline_fields(data: bytes, start: int, delimiter: str) -> list[int] | None:
    """Return [start, end, start, end, ...] of the contents of the quoted fields from start on
    that may hold a line break (every one that does, and one left open at the end); None if
    a quote is misplaced."""
    walk = quoted_field_walk(delimiter.encode(), b"\r\n")
    view = memoryview(data)[start:]  # a BOM is not a separator, but start acts as the file's
    spans = walk_to_special_fields(walk, view)
    return None if spans is None else [start + at for at in spans]


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
