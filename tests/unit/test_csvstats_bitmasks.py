"""The bit masks the numpy scans use say, bit for bit, what a loop over the bytes says; and the
engine's record layout counts fields as a walk over the quotes does."""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.csvstats import bitmasks, columnar
from tests.unit.test_csvstats_properties import PROPERTY_SETTINGS

np = pytest.importorskip("numpy")

# Bytes that matter to the scans, and one that does not, in any order and length.
some_bytes = st.lists(st.sampled_from(b'",\n\rx'), max_size=300).map(bytes)


def bits_of(words, size: int) -> list[int]:
    return [int(words[p // 64] >> np.uint64(p % 64)) & 1 for p in range(size)]


def flags_of(data: bytes, byte: int) -> list[int]:
    return [int(b == byte) for b in data]


@PROPERTY_SETTINGS
@given(data=some_bytes, block=st.sampled_from([64, 128, 1 << 20]))
def test_flags_set_one_bit_per_matching_byte_across_blocks(data, block):
    with mock.patch.object(bitmasks, "_BLOCK_BYTES", block):
        words = bitmasks.flags(np, np.frombuffer(data, np.uint8), ord(","))
    assert len(words) == -(-len(data) // 64)
    assert bits_of(words, len(words) * 64) == flags_of(data, ord(",")) + [0] * (
        len(words) * 64 - len(data)
    )
    assert bitmasks.count(np, words) == data.count(b",")


@PROPERTY_SETTINGS
@given(data=some_bytes)
def test_nth_is_the_place_of_each_set_bit_in_turn(data):
    words = bitmasks.flags(np, np.frombuffer(data, np.uint8), ord(","))
    places = [i for i, b in enumerate(data) if b == ord(",")]
    assert [bitmasks.nth(np, words, n) for n in range(len(places))] == places


@PROPERTY_SETTINGS
@given(data=some_bytes.filter(bool), by=st.integers(-63, 63).filter(bool))
def test_shifted_moves_each_flag_by_that_many_bytes(data, by):
    words = bitmasks.flags(np, np.frombuffer(data, np.uint8), ord('"'))
    size = len(words) * 64
    flags = flags_of(data, ord('"')) + [0] * (size - len(data))
    expected = [flags[p - by] if 0 <= p - by < size else 0 for p in range(size)]
    assert bits_of(bitmasks.shifted(np, words, by), size) == expected


@PROPERTY_SETTINGS
@given(data=some_bytes.filter(bool), odd=st.integers(0, 1))
def test_prefix_parity_is_the_running_parity_of_the_bits_up_to_each(data, odd):
    words = bitmasks.flags(np, np.frombuffer(data, np.uint8), ord('"'))
    running, expected = odd, []
    for flag in flags_of(data, ord('"')) + [0] * (len(words) * 64 - len(data)):
        running ^= flag
        expected.append(running)
    assert bits_of(bitmasks.prefix_parity(np, words, odd), len(words) * 64) == expected


@PROPERTY_SETTINGS
@given(data=some_bytes.filter(bool), places=st.lists(st.integers(0, 299)))
def test_running_counts_count_the_bits_before_each_place(data, places):
    words = bitmasks.flags(np, np.frombuffer(data, np.uint8), ord("\n"))
    at = np.array(sorted(p for p in places if p < len(data)), dtype=np.int64)
    assert bitmasks.running_counts(np, words, at).tolist() == [
        data[:p].count(b"\n") for p in at.tolist()
    ]


@given(words=st.integers(1, 4), data=st.data())
def test_span_sets_exactly_the_bits_from_start_to_end(words, data):
    start = data.draw(st.integers(0, 63))
    end = data.draw(st.integers(start, words * 64))
    bits = bits_of(bitmasks.span(np, words, start, end), words * 64)
    assert bits == [int(start <= p < end) for p in range(words * 64)]


@PROPERTY_SETTINGS
@given(data=some_bytes)
def test_first_is_the_place_of_the_lowest_set_bit(data):
    words = bitmasks.flags(np, np.frombuffer(data, np.uint8), ord("\n"))
    assert bitmasks.first(np, words) == (data.index(b"\n") if b"\n" in data else None)


@st.composite
def runs_of_bits(draw) -> tuple[bytes, int]:
    """Bytes of marks (LFs) each after a run of bits (commas) about `per` long, padded so that
    a word holds several marks or none."""
    per = draw(st.integers(0, 4))
    runs = draw(st.lists(st.sampled_from([per, per, per, per + 1, max(0, per - 1)]), max_size=30))
    pads = st.integers(0, 70)
    return b"".join(b"," * run + b"x" * draw(pads) + b"\n" for run in runs) + b"x", per


@PROPERTY_SETTINGS
@given(case=runs_of_bits())
def test_evenly_spaced_holds_exactly_when_each_mark_ends_a_run_of_per_bits(case):
    data, per = case
    array = np.frombuffer(data, np.uint8)
    bits, marks = bitmasks.flags(np, array, ord(",")), bitmasks.flags(np, array, ord("\n"))
    ends = [p for p, byte in enumerate(data) if byte == ord("\n")]
    expected = all(data[:end].count(b",") == (k + 1) * per for k, end in enumerate(ends))
    assert bitmasks.evenly_spaced(np, bits, marks, per) is expected


def fields_per_record(data: bytes) -> list[int] | None:
    """Each LF-ended record's fields (and an unended last one's), walking the quotes one by
    one; None where a quote is left open."""
    inside, fields, counts = False, 1, []
    for byte in data:
        if byte == ord('"'):
            inside = not inside
        elif not inside and byte == ord(","):
            fields += 1
        elif not inside and byte == ord("\n"):
            counts.append(fields)
            fields = 1
    if inside:
        return None
    return counts if data.endswith(b"\n") else [*counts, fields]


def has_lone_cr(data: bytes) -> bool:
    """Whether a CR is not followed by an LF (polars would not end a record there)."""
    return any(byte == ord("\r") and data[p + 1 : p + 2] != b"\n" for p, byte in enumerate(data))


@PROPERTY_SETTINGS
@given(data=some_bytes.filter(bool))
def test_record_layout_counts_every_records_fields_outside_quotes_and_refuses_a_lone_cr(data):
    layout = columnar.record_layout(np, data, b",")
    counts = fields_per_record(data)
    if counts is None or len(set(counts)) != 1 or has_lone_cr(data):
        assert layout is None
    elif layout is not None:  # None also where an empty line stands in a one-field file
        assert (layout.records, layout.width) == (len(counts), counts[0])
    else:
        empty_line = b"\n\n" in data or b"\n\r\n" in data or data.startswith((b"\n", b"\r\n"))
        assert counts[0] == 1 and empty_line


# Records of one width, but for a record or two a field short or long, often several to a word.
@st.composite
def near_even_records(draw) -> bytes:
    width = draw(st.integers(1, 4))
    field = st.sampled_from(["", "x", '""', '","', '"\n"', "xx"])
    rows = draw(st.lists(st.lists(field, min_size=width, max_size=width), min_size=1, max_size=40))
    # One record short and one long leave the count of delimiters as it was.
    for change in draw(st.lists(st.sampled_from(["short", "long"]), max_size=2)):
        row = draw(st.integers(0, len(rows) - 1))
        rows[row] = rows[row][:-1] if change == "short" else [*rows[row], "x"]
    text = "\n".join(",".join(row) for row in rows)
    return (text + "\n" * draw(st.booleans())).encode()


@PROPERTY_SETTINGS
@given(data=near_even_records().filter(bool))
def test_record_layout_finds_the_one_record_of_another_width(data):
    layout = columnar.record_layout(np, data, b",")
    counts = fields_per_record(data)
    if len(set(counts)) != 1:
        assert layout is None
    elif layout is not None:
        assert (layout.records, layout.width) == (len(counts), counts[0])
    else:
        assert counts[0] == 1  # an empty line in a one-field file goes to the core
