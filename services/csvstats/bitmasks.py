"""Byte flags as bits in 64-bit words, with the shifts and quote parities the numpy scans need.

Bit p of a mask stands for byte p of the data it was taken from: word p // 64, bit p % 64
(little-endian, so a shift towards the high bits moves a flag to a later byte). numpy is
passed in by the caller, which imported it on first use (the `fast` extra).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

# Bytes compared and packed at a time: the bool array numpy compares into stays this small
# whatever the data's size. A multiple of 64, so that each block fills whole words.
_BLOCK_BYTES = 1 << 20


def flags(np: ModuleType, data: Any, byte: int) -> Any:
    """Where data (a uint8 array) holds byte, one bit per byte, clear past its end."""
    words = np.zeros(-(-len(data) // 64), "<u8")
    packed = words.view(np.uint8)
    for start in range(0, len(data), _BLOCK_BYTES):
        block = np.packbits(data[start : start + _BLOCK_BYTES] == byte, bitorder="little")
        packed[start // 8 : start // 8 + len(block)] = block
    return words


def shifted(np: ModuleType, bits: Any, by: int) -> Any:
    """Bit p of the result is bit p - by of bits: each byte's flag moved `by` bytes on
    (0 < |by| < 64)."""
    step = abs(by)
    if by > 0:
        moved = bits << np.uint64(step)
        moved[1:] |= bits[:-1] >> np.uint64(64 - step)
    else:
        moved = bits >> np.uint64(step)
        moved[:-1] |= bits[1:] << np.uint64(64 - step)
    return moved


def prefix_parity(np: ModuleType, bits: Any, odd: int = 0) -> Any:
    """Bit p of the result: the parity of odd and the bits set up to and including p."""
    parity = bits.copy()
    for shift in (1, 2, 4, 8, 16, 32):  # a prefix xor within each word
        parity ^= parity << np.uint64(shift)
    # Then each word flipped where the words before it (and odd) leave an odd count.
    carry = np.bitwise_xor.accumulate(parity >> np.uint64(63))
    carry[1:] = carry[:-1]
    carry[0] = 0
    carry ^= np.uint64(odd)
    parity ^= np.uint64(0) - carry
    return parity


def span(np: ModuleType, words: int, start: int, end: int) -> Any:
    """Bits start to end (not included) set in `words` words, the rest clear."""
    bits = np.full(words, 0xFFFF_FFFF_FFFF_FFFF, np.uint64)
    bits[0] &= np.uint64(~((1 << start) - 1) & 0xFFFF_FFFF_FFFF_FFFF)
    if end // 64 < words:
        bits[end // 64] &= np.uint64((1 << (end % 64)) - 1)
        bits[end // 64 + 1 :] = 0
    return bits


def count(np: ModuleType, bits: Any) -> int:
    """How many bits are set."""
    return int(np.bitwise_count(bits).sum())


def nth(np: ModuleType, bits: Any, n: int) -> int:
    """The place of set bit number n (from 0), which must be set: no array as long as the
    set bits' places is made."""
    counts = np.bitwise_count(bits)
    through = np.cumsum(counts, dtype=np.int64)  # bits set up to the end of each word
    word = int(np.searchsorted(through, n + 1))
    left, rank = int(bits[word]), n - int(through[word] - counts[word])
    for _ in range(rank):
        left &= left - 1  # its lowest set bit cleared
    return word * 64 + (left & -left).bit_length() - 1


def first(np: ModuleType, bits: Any) -> int | None:
    """The place of the lowest set bit, None if none is set."""
    words = np.flatnonzero(bits)
    if not words.size:
        return None
    word = int(bits[words[0]])
    return int(words[0]) * 64 + (word & -word).bit_length() - 1


def running_counts(np: ModuleType, bits: Any, at: Any) -> Any:
    """How many bits are set before each place in at (an array of bit places)."""
    words = at >> 6
    counts = np.bitwise_count(bits)
    before = np.cumsum(counts, dtype=np.int64) - counts
    below = (np.uint64(1) << (at & 63).astype(np.uint64)) - np.uint64(1)
    return before[words] + np.bitwise_count(bits[words] & below)


def evenly_spaced(np: ModuleType, bits: Any, marks: Any, per: int) -> bool:
    """Whether exactly (k + 1) * per bits are set before the k-th set mark (from 0), for every
    mark: each mark ends a run of `per` bits."""
    counts, marked = np.bitwise_count(bits), np.bitwise_count(marks)
    before = np.cumsum(counts, dtype=np.int64) - counts  # bits before each word
    rank = np.cumsum(marked, dtype=np.int64) - marked  # marks before each word
    words = np.flatnonzero(marks)  # only the words that hold a mark, and their bits
    left, held, before, rank = marks[words], bits[words], before[words], rank[words]
    # The lowest mark of every word that still has one, a round at a time (as many rounds as
    # the most marks a word holds): no array as long as the marks' places is made.
    while left.size:
        lowest = left & (np.uint64(0) - left)
        below = before + np.bitwise_count(held & (lowest - np.uint64(1)))
        if ((rank + 1) * per != below).any():
            return False
        left ^= lowest
        rank += 1
        more = left != 0
        if not more.all():
            left, held, before, rank = left[more], held[more], before[more], rank[more]
    return True
