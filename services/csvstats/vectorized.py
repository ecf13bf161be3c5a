"""Plan a file's chunks by quote parity with numpy: bit masks of each block's quotes and line
breaks, no Python object per field.

numpy is optional (the `fast` extra) and imported on first use, so importing this module still
loads only the standard library. Each batch of BATCH_BLOCKS blocks of the buffer (a copy of about
BLOCK_BYTES each, with the delimiter's length in bytes before and after the batch) becomes bit
masks, one bit per byte in 64-bit words: its quotes, LFs, CRs and delimiters. Shifts and xors over
the words give every byte the parity of the quotes before it (a prefix xor within each word, then
each word's carry), which tells whether a quote opens or closes a field (even ranks open), so the
quote check of the exact scan becomes two masks: an opening quote follows the start, the delimiter,
a CR, an LF or a closing quote; a closing quote comes before the delimiter, a CR, an LF, the end or
an opening quote (a doubled quote is a closing quote and an opening one side by side). A line break
(LF, CRLF, a lone CR) is a record terminator when an even number of quotes comes before it: the
counts, kept per block, are popcounts of the words, with no array as long as the quotes or the
breaks. Only the blocks where a chunk ends are scanned a second time, for that chunk's last
terminator; each chunk is hashed by a thread as soon as its end is known, and the caller hashes
those left, from the last back, once every end is. Returns None where the exact scan must decide
(a misplaced or unterminated quote, bytes that are not UTF-8, an empty file): the caller then runs
it, and it names the error. Without numpy the parity counts of
services.csvstats.parity plan the file instead.
"""

from __future__ import annotations

import codecs
import functools
from array import array
from bisect import bisect_left
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from services.csvstats import bitmasks
from services.csvstats.parity import ParityPlan, digest_range, release

# The counts are kept per block of this size: finding a chunk's end scans its block again.
BLOCK_BYTES = 1 << 18
# Blocks scanned by one pass of numpy, each counted at its end: each call's fixed cost is paid
# once for a mebibyte (the export sample's split 76 -> 67 ms against one block a pass).
BATCH_BLOCKS = 4
_QUOTE, _LF, _CR = 0x22, 0x0A, 0x0D
# Stands for the start before the first byte and the end after the last: a CR, because a
# quote may open after it or close before it, and a CR just before it is not half a CRLF.
_EDGE = b"\r"
# Pads the context beyond the edge to the delimiter's length: never part of a delimiter (one
# of several bytes is a non-ASCII character, whose UTF-8 bytes are never zero).
_PAD = b"\x00"


@functools.cache
def engine() -> ModuleType | None:
    """numpy if it is installed, else None (the parity counts plan the file)."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def preload() -> None:
    """Import numpy now where it is installed (a coordinator's start, not its first upload)."""
    engine()


@dataclass(frozen=True)
class BlockScan:
    """Bytes' line breaks and quotes, given whether a quote was open before them, counted
    from their start up to each of their cuts (by default, their end alone)."""

    terminators: Any  # record terminators outside quotes
    lines: Any  # physical line breaks
    quotes: Any
    well_placed: bool  # whether its quotes open and close fields as RFC 4180 allows
    # Only when a terminator was asked for: the offset just past it, from the block start, and
    # the physical line breaks up to and including it.
    end: int | None
    lines_through: int | None


def scan_block(
    block: bytes,
    before: bytes,
    after: bytes,
    odd: int,
    delimiter: bytes,
    cuts: list[int] | None = None,
    nth: int | None = None,
) -> BlockScan:
    """Scan a block after `odd` open quotes; before and after are the bytes around it, as
    many as the delimiter has, cuts the offsets in it to count up to, and nth the terminator
    (from 0) to find."""
    np, width, size = engine(), len(delimiter), len(block)
    padded = np.frombuffer(before + block + after, np.uint8)
    # Bit p of each mask (in 64-bit words) stands for padded[p].
    quotes = bitmasks.flags(np, padded, _QUOTE)
    lf = bitmasks.flags(np, padded, _LF)
    neighbour = quotes | lf
    breaks = lf  # without CRs, every line break is an LF
    if b"\r" in before or b"\r" in block or b"\r" in after:
        cr = bitmasks.flags(np, padded, _CR)
        neighbour |= cr
        # A CR is a break of its own unless an LF follows (then that LF is the break).
        breaks = lf | (cr & ~bitmasks.shifted(np, lf, -1))
    starts = bitmasks.flags(np, padded, delimiter[0])  # where a whole delimiter starts
    for k in range(1, width):
        starts &= bitmasks.shifted(np, bitmasks.flags(np, padded, delimiter[k]), -k)
    # An opening quote follows the start, the delimiter, a CR, an LF or a closing quote; a
    # closing quote comes before the delimiter, a CR, an LF, the end or an opening quote (a
    # doubled quote is a closing quote and an opening one side by side).
    opens_after = bitmasks.shifted(np, neighbour, 1) | bitmasks.shifted(np, starts, width)
    closes_before = bitmasks.shifted(np, neighbour | starts, -1)
    body = bitmasks.span(np, len(quotes), width, width + size)
    quotes &= body
    breaks &= body
    # Whether each byte lies inside quotes, its own quote counted: the parity of the quotes
    # up to it, after the `odd` open before the block.
    inside = bitmasks.prefix_parity(np, quotes, odd)
    before_quote = inside ^ quotes
    misplaced = quotes & ((before_quote & ~closes_before) | (~before_quote & ~opens_after))
    terminator = breaks & ~inside
    end = lines_through = None
    if nth is not None:
        at = bitmasks.nth(np, terminator, nth)
        end = at - (width - 1)
        lines_through = int(bitmasks.running_counts(np, breaks, np.array([at]))[0]) + 1
    through = np.asarray(cuts or [size], np.int64) + width
    return BlockScan(
        terminators=bitmasks.running_counts(np, terminator, through),
        lines=bitmasks.running_counts(np, breaks, through),
        quotes=bitmasks.running_counts(np, quotes, through),
        well_placed=not misplaced.any(),
        end=end,
        lines_through=lines_through,
    )


class VectorLayout:
    """Per-block counts of a buffer, from numpy's scan of each block."""

    def __init__(self, data, start: int, delimiter: bytes):
        self.data = data
        self.start = start
        self.delimiter = delimiter
        self.starts = array("q")  # each block's first byte
        self.odd = array("b")  # whether an odd number of quotes comes before it
        self.records_before = array("q")  # terminators outside quotes before it
        self.lines_before = array("q")  # physical line breaks before it
        self.proven = False  # UTF-8, every quote well placed, none left open
        size, pos, odd, records, lines = len(data), start, 0, 0, 0
        width = len(delimiter)
        before = _PAD * (width - 1) + _EDGE
        while pos < size:
            cuts, end = [], pos
            while end < size and len(cuts) < BATCH_BLOCKS:
                end = _block_end(data, end, BLOCK_BYTES)
                cuts.append(end - pos)
            block = data[pos:end]
            if not _is_utf8(block):
                return
            scan = scan_block(block, before, self._after(end), odd, delimiter, cuts)
            if not scan.well_placed:
                return
            # Each block's start, and the counts before it.
            for first, terminators, breaks, quotes in zip(
                [0, *cuts[:-1]],
                [0, *scan.terminators[:-1]],
                [0, *scan.lines[:-1]],
                [0, *scan.quotes[:-1]],
                strict=True,
            ):
                self.starts.append(pos + first)
                self.odd.append(odd ^ (int(quotes) & 1))
                self.records_before.append(records + int(terminators))
                self.lines_before.append(lines + int(breaks))
            records += int(scan.terminators[-1])
            lines += int(scan.lines[-1])
            odd ^= int(scan.quotes[-1]) & 1
            # The bytes before the next block are kept, not read again: reading a released page
            # maps it back, with its neighbours.
            release(data, pos, end)
            pos, before = end, block[-width:] if len(block) >= width else (before + block)[-width:]
        self.starts.append(size)
        self.records_before.append(records)
        self.lines_before.append(lines)
        self.proven = not odd

    @property
    def terminators(self) -> int:
        """Record terminators outside quotes in the whole buffer."""
        return self.records_before[-1]

    def _after(self, end: int) -> bytes:
        """The delimiter's length in bytes from end on, the file's end standing as _EDGE."""
        width = len(self.delimiter)
        after = self.data[end : end + width]
        if len(after) < width:
            after += (_EDGE + _PAD * width)[: width - len(after)]
        return after

    def boundary(self, terminator: int) -> tuple[int, int]:
        """The offset just past record terminator number `terminator` (from 1), and the
        physical line that starts there: its block scanned again, for that terminator."""
        i = bisect_left(self.records_before, terminator) - 1
        data, pos, end = self.data, self.starts[i], self.starts[i + 1]
        width = len(self.delimiter)
        edge = _PAD * (width - 1) + _EDGE
        before = (edge + data[max(self.start, pos - width) : pos])[-width:]
        nth = terminator - self.records_before[i] - 1
        scan = scan_block(
            data[pos:end], before, self._after(end), self.odd[i], self.delimiter, nth=nth
        )
        release(data, max(0, pos - width), min(len(data), end + width))
        return pos + scan.end, 1 + self.lines_before[i] + scan.lines_through


def _block_end(data, pos: int, size: int) -> int:
    """About size on from pos, never inside a UTF-8 character (one longer than size whole)."""
    limit = len(data)
    end = back = min(pos + size, limit)
    while pos < back < limit and 0x80 <= data[back] < 0xC0:
        back -= 1
    if back > pos:
        return back
    # Past a character's continuation bytes (only three may follow in UTF-8; more fail later).
    while end < min(limit, pos + size + 3) and 0x80 <= data[end] < 0xC0:
        end += 1
    return end


def _is_utf8(block: bytes) -> bool:
    if block.isascii():
        return True
    try:
        str(block, "utf-8")
    except UnicodeDecodeError:
        return False
    return True


def plan_by_vectors(data, delimiter: str, chunks: int) -> ParityPlan | None:
    """The file's chunk plan by quote parity in numpy, or None where it does not decide."""
    if engine() is None:
        return None
    start = len(codecs.BOM_UTF8) if data[:3] == codecs.BOM_UTF8 else 0
    if start == len(data):
        return None
    layout = VectorLayout(data, start, delimiter.encode())
    if not layout.proven:
        return None
    total, size_of_data = layout.terminators, len(data)
    body_start, body_line = (
        layout.boundary(1) if total else (size_of_data, 1 + layout.lines_before[-1])
    )
    records = max(0, total - 1) + (body_start < size_of_data and data[-1:] not in (b"\n", b"\r"))
    size = max(1, -(-records // chunks))
    count = max(1, -(-records // size))
    ranges, byte_start, line = [], body_start, body_line
    with ThreadPoolExecutor(max_workers=1) as hashing:
        digests = []
        for index in range(count):
            if index == count - 1:
                byte_end, next_line = size_of_data, 0
            else:
                byte_end, next_line = layout.boundary(1 + (index + 1) * size)
            ranges.append((byte_start, byte_end, line))
            digests.append(hashing.submit(digest_range, data, byte_start, byte_end))
            byte_start, line = byte_end, next_line
        hexdigests = _share_digests(data, ranges, digests)
    return ParityPlan(start, body_start - 1 if total else -1, records, ranges, hexdigests)


def _share_digests(data, ranges: list, digests: list[Future]) -> list[str]:
    """The chunks' digests, the caller hashing from the last chunk back those the thread has
    not started: two threads at once, where three on two cores slowed the boundaries by
    waiting on each other for the GIL."""
    mine = {}
    for index in reversed(range(len(digests))):
        if not digests[index].cancel():
            break  # the thread has started this one, so every one before it too
        byte_start, byte_end, _ = ranges[index]
        mine[index] = digest_range(data, byte_start, byte_end)
    return [mine[i] if i in mine else digest.result() for i, digest in enumerate(digests)]
