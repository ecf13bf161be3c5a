"""Plan a file's chunks by quote parity: whole-buffer counts over blocks, no walk per field.

When every quote is well placed (checked by one regex match over the whole buffer), a line
break lies inside a quoted field exactly when an odd number of quotes comes before it. So the
file is read in blocks of about a mebibyte (copies of that size, whatever the buffer: bytes
or a memory map of the spool), each block's quotes counted for the parity at the next, and its
record terminators outside quotes counted by splitting the block at its quotes. Offsets go in
arrays. Only the few blocks where a chunk ends are searched record by record. The chunks'
digests are computed in a thread while the quotes are checked (hashlib releases the GIL).
Returns None whenever the exact scan must decide (a misplaced or unterminated quote, bytes
that are not UTF-8, an empty file): the caller then runs it, and it raises the precise error.
"""

from __future__ import annotations

import codecs
import hashlib
import mmap
import re
from array import array
from bisect import bisect_left
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from services.csvstats.syntax import QUOTE, line_breaks, quoted_field_walk, walk_to_special_fields

BLOCK_BYTES = 1 << 20
# The quote check's runs span this many blocks: pages of a memory map it has read are let go.
_SEGMENT_BLOCKS = 4
_STEP_BYTES = 1 << 16
_TERMINATOR = re.compile(rb"\r\n|\r|\n")
_LONE_CR = re.compile(rb"\r(?!\n)")
_QUOTED = re.compile(rb'"[^"]*"')


def _line_breaks(buf: bytes) -> int:
    """Physical line breaks in buf (LF, CRLF, lone CR), counting lone CRs only if any."""
    lf = buf.count(b"\n")
    if _LONE_CR.search(buf) is None:
        return lf
    return lf + buf.count(b"\r") - buf.count(b"\r\n")


def _breaks_inside_quotes(block: bytes, odd: int) -> int:
    """Line breaks inside quoted fields, if an odd number of quotes came before the block."""
    if QUOTE not in block:
        return _line_breaks(block) if odd else 0
    # Balanced with a quote before (if one is open) and after (if one is left open), every
    # quoted field's contents are matched, a doubled quote's halves apart; no CRLF is cut.
    if odd:
        block = QUOTE + block
    if block.count(QUOTE) & 1:
        block += QUOTE
    return _line_breaks(b"".join(_QUOTED.findall(block)))


class ParityLayout:
    """Per-block counts of a buffer whose quotes are assumed well placed (checked later)."""

    def __init__(self, data, start: int):
        self.data = data
        self.starts = array("q")  # each block's first byte
        self.odd = array("b")  # whether an odd number of quotes comes before it
        self.records_before = array("q")  # terminators outside quotes before it
        self.lines_before = array("q")  # physical line breaks before it
        self.utf8 = True
        size, pos, odd, records, lines = len(data), start, 0, 0, 0
        while pos < size:
            end = self._block_end(pos)
            block = data[pos:end]
            self.starts.append(pos)
            self.odd.append(odd)
            self.records_before.append(records)
            self.lines_before.append(lines)
            if self.utf8 and not block.isascii():
                try:
                    str(block, "utf-8")
                except UnicodeDecodeError:
                    self.utf8 = False
            breaks = _line_breaks(block)
            records += breaks - _breaks_inside_quotes(block, odd)
            lines += breaks
            odd ^= block.count(QUOTE) & 1
            release(data, pos, end)
            pos = end
        self.starts.append(size)
        self.records_before.append(records)
        self.lines_before.append(lines)
        self.quotes_open = bool(odd)

    @property
    def terminators(self) -> int:
        """Record terminators outside quotes in the whole buffer."""
        return self.records_before[-1]

    def _block_end(self, pos: int, size: int = BLOCK_BYTES, limit: int | None = None) -> int:
        """About size on, never inside a UTF-8 character or a CRLF."""
        data = self.data
        limit = len(data) if limit is None else limit
        end = min(pos + size, limit)
        while end < limit and end > pos + 4 and 0x80 <= data[end] < 0xC0:
            end -= 1
        if end < limit and data[end - 1] == 0x0D and data[end] == 0x0A:
            end += 1
        return end

    def offset_after(self, terminator: int) -> int:
        """The offset just past record terminator number `terminator` (from 1)."""
        i = bisect_left(self.records_before, terminator) - 1
        pos, end, odd = self.starts[i], self.starts[i + 1], self.odd[i]
        left = terminator - self.records_before[i]
        # The block again in small steps, then the one step that holds it record by record.
        while True:
            step_end = self._block_end(pos, _STEP_BYTES, end)
            step = self.data[pos:step_end]
            found = _line_breaks(step) - _breaks_inside_quotes(step, odd)
            if found >= left:
                break
            left -= found
            odd ^= step.count(QUOTE) & 1
            pos = step_end
        for k, piece in enumerate(step.split(QUOTE)):
            if k % 2 == odd:
                for match in _TERMINATOR.finditer(piece):
                    left -= 1
                    if not left:
                        return pos + match.end()
            pos += len(piece) + 1
        raise AssertionError("a block's count of terminators was wrong")

    def record_end_in(self, i: int) -> int | None:
        """An offset just past a record terminator outside quotes near the end of block i."""
        base, end = self.starts[i], self.starts[i + 1]
        odd_at_end = self.odd[i + 1] if i + 1 < len(self.odd) else int(self.quotes_open)
        while end > base:
            at = max(self.data.rfind(b"\n", base, end), self.data.rfind(b"\r", base, end))
            if at < 0:
                return None
            tail = self.data[at + 1 : self.starts[i + 1]]
            if not odd_at_end ^ (tail.count(QUOTE) & 1):
                return at + 1
            end = at
        return None

    def line_of(self, offset: int) -> int:
        """The physical line on which the byte at offset lies."""
        i = max(0, bisect_left(self.starts, offset + 1) - 1)
        if i >= len(self.starts) - 1:
            return 1 + self.lines_before[-1]
        return 1 + self.lines_before[i] + line_breaks(self.data[self.starts[i] : offset])


@dataclass(frozen=True)
class ParityPlan:
    """Where the header is, how many records follow, and each chunk's bytes, line and digest."""

    header_start: int  # past a BOM
    header_newline: int  # the offset of the header terminator's last byte, or -1 if none
    records: int
    ranges: list[tuple[int, int, int]]  # (byte_start, byte_end, first_line) per chunk
    digests: list[str]


def plan_by_parity(data, delimiter: str, chunks: int) -> ParityPlan | None:
    """The file's chunk plan by quote parity, or None where the exact scan must decide."""
    start = len(codecs.BOM_UTF8) if data[:3] == codecs.BOM_UTF8 else 0
    if start == len(data):
        return None
    layout = ParityLayout(data, start)
    if not layout.utf8 or layout.quotes_open:
        return None
    total = layout.terminators
    body_start = layout.offset_after(1) if total else len(data)
    records = max(0, total - 1) + (body_start < len(data) and not _ends_in_terminator(data))
    size = max(1, -(-records // chunks))
    count = max(1, -(-records // size))
    ranges, byte_start = [], body_start
    for index in range(count):
        last = index == count - 1
        byte_end = len(data) if last else layout.offset_after(1 + (index + 1) * size)
        ranges.append((byte_start, byte_end, layout.line_of(byte_start)))
        byte_start = byte_end
    view = memoryview(data)
    try:
        with ThreadPoolExecutor(max_workers=1) as hashing:
            digests = hashing.submit(_digests, data, ranges)
            well_placed = all(
                _quotes_well_placed(data, view, a, b, delimiter) for a, b in _segments(layout)
            )
            result = digests.result()
    finally:
        view.release()
    if not well_placed:
        return None
    return ParityPlan(start, body_start - 1 if total else -1, records, ranges, result)


def _ends_in_terminator(data) -> bool:
    return data[-1:] in (b"\n", b"\r")


def release(data, start: int, end: int) -> None:
    """Let the pages of a memory map's [start, end) go from this process's resident set
    (they stay in the page cache, and come back if read again)."""
    if isinstance(data, mmap.mmap) and end > start:
        start -= start % mmap.PAGESIZE
        data.madvise(mmap.MADV_DONTNEED, start, end - start)


def _digests(data, ranges: list) -> list[str]:
    return [digest_range(data, a, b) for a, b, _ in ranges]


def digest_range(data, start: int, end: int) -> str:
    """The SHA-256 of data[start:end], read a block at a time (a memory map's pages let go)."""
    sha = hashlib.sha256()
    with memoryview(data) as view:
        for at in range(start, end, BLOCK_BYTES):
            stop = min(end, at + BLOCK_BYTES)
            sha.update(view[at:stop])
            release(data, at, stop)
    return sha.hexdigest()


def _segments(layout: ParityLayout):
    """Runs of whole records of about _SEGMENT_BLOCKS blocks, from the header's start on."""
    start, size = layout.starts[0], layout.starts[-1]
    for i in range(_SEGMENT_BLOCKS - 1, len(layout.odd) - 1, _SEGMENT_BLOCKS):
        end = layout.record_end_in(i)
        if end is not None and end > start:
            yield start, end
            start = end
    yield start, size


def _quotes_well_placed(data, view: memoryview, start: int, end: int, delimiter: str) -> bool:
    """One regex match over whole records: every quote opens, closes or is doubled in a field,
    and none is left open (so the next run starts outside quotes, as the whole file's would)."""
    separator = delimiter.encode()
    rare = b"\x01" if separator == b"\x00" else b"\x00"
    spans = walk_to_special_fields(quoted_field_walk(separator, rare), view[start:end])
    release(data, start, end)
    return spans is not None and not (spans and spans[-1] == end - start)
