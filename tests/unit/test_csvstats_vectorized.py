"""The numpy plan is the exact scan's plan on every input it accepts, and it accepts what the
parity counts accept; without numpy, split plans alike."""

from __future__ import annotations

import mmap
import sys
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devstack.sample_csv import generate_export_csv
from services.csvstats import CsvFormatError, parity, split, vectorized
from services.csvstats.planning import split_exactly
from tests.unit.test_csvstats_parity import adversarial_quoting, export_cases
from tests.unit.test_csvstats_properties import (
    PROPERTY_SETTINGS,
    CsvCase,
    csv_cases,
    quote_heavy_cases,
)

# numpy is the fast extra's: where it is not installed, only the fallback's test runs.
NEEDS_NUMPY = pytest.mark.skipif(vectorized.engine() is None, reason="numpy is not installed")
# What a block edge may cut or an upload may hold: BOMs, CRLFs, lone CRs, multibyte and
# invalid UTF-8, quotes at a field's edge or in its middle.
EDGE_BYTES = [b"\xef\xbb\xbf", b"\r\n", b"\r", b"\n", b"\xc3\xa9", b"\xe2\x82\xac", b"\xc3"]
EDGE_BYTES += [b"\xff", b'"', b'""', b'",', b',"', b'x"', b'"x', b'"\r\n', b'\r\n"']


@st.composite
def edge_cases(draw) -> CsvCase:
    """A well-formed file, perhaps with a BOM, with a few edge bytes put anywhere."""
    case = draw(st.one_of(quote_heavy_cases(malformed=False), export_cases()))
    data = (b"\xef\xbb\xbf" if draw(st.booleans()) else b"") + case.data
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from(EDGE_BYTES)) + data[at:]
    return CsvCase(data, case.delimiter)


any_case = st.one_of(
    csv_cases(), quote_heavy_cases(), export_cases(), adversarial_quoting(), edge_cases()
)


def exact_outcome(case: CsvCase, chunks: int) -> tuple:
    try:
        return ("plan", split_exactly(case.data, "value", case.delimiter, chunks))
    except CsvFormatError as exc:
        return ("format", str(exc))


@NEEDS_NUMPY
@PROPERTY_SETTINGS
@given(
    case=any_case,
    chunks=st.integers(1, 64),
    block=st.sampled_from([1, 2, 3, 5, 64, 130, 1 << 18]),
    batch=st.sampled_from([1, 3, vectorized.BATCH_BLOCKS]),
)
def test_numpy_plan_is_the_exact_plan_and_declines_only_what_parity_declines(
    case, chunks, block, batch
):
    # Tiny blocks put a block edge inside quoted fields, CRLFs and UTF-8 characters; blocks of
    # more than 64 bytes carry the quotes' parity from one 64-bit word of bits to the next;
    # batches of several blocks count each block's quotes and breaks within one scan.
    with (
        mock.patch.object(vectorized, "BLOCK_BYTES", block),
        mock.patch.object(vectorized, "BATCH_BLOCKS", batch),
    ):
        planned = vectorized.plan_by_vectors(case.data, case.delimiter, chunks)
        try:
            fast = ("plan", split(case.data, "value", case.delimiter, chunks))
        except CsvFormatError as exc:
            fast = ("format", str(exc))
    exact = exact_outcome(case, chunks)
    assert fast == exact
    # The same acceptance as the parity counts' regex check, and the same plan.
    assert planned == parity.plan_by_parity(case.data, case.delimiter, chunks)


@NEEDS_NUMPY
def test_numpy_plans_the_export_sample_in_many_blocks_as_the_exact_scan_does():
    data = generate_export_csv(20_000, seed=7)
    with mock.patch.object(vectorized, "BLOCK_BYTES", 4096):
        for chunks in (1, 8, 64):
            planned = vectorized.plan_by_vectors(data, ",", chunks)
            assert planned is not None
            assert split(data, "value", ",", chunks) == split_exactly(data, "value", ",", chunks)


@NEEDS_NUMPY
def test_numpy_plan_reads_a_memory_map_and_leaves_it_closable(tmp_path):
    data = generate_export_csv(3_000, seed=5)
    path = tmp_path / "upload.csv"
    path.write_bytes(data)
    with (
        path.open("rb") as f,
        mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
        mock.patch.object(vectorized, "BLOCK_BYTES", 8192),
    ):
        assert vectorized.plan_by_vectors(mapped, ",", 5) is not None
        assert split(mapped, "value", ",", 5) == split_exactly(data, "value", ",", 5)


def test_without_numpy_split_plans_by_parity_counts_exactly_alike(monkeypatch):
    vectorized.engine.cache_clear()
    monkeypatch.setitem(sys.modules, "numpy", None)  # import numpy raises ImportError
    try:
        assert vectorized.engine() is None
        data = generate_export_csv(2_000, seed=3)
        assert vectorized.plan_by_vectors(data, ",", 8) is None
        for chunks in (1, 8, 64):
            assert split(data, "value", ",", chunks) == split_exactly(data, "value", ",", chunks)
        misplaced = b'id,value\n1,2\n3,x"y\n'
        messages = []
        for run in (split, split_exactly):
            try:
                run(misplaced, "value", ",", 2)
            except CsvFormatError as exc:
                messages.append(str(exc))
        assert len(messages) == 2 and messages[0] == messages[1]
    finally:
        vectorized.engine.cache_clear()


@NEEDS_NUMPY
def test_a_delimiter_of_three_bytes_is_checked_whole_across_block_edges():
    well_placed = '"value"€x\n1€"a€""b"""€"c\r\nd"\r\n"2"€""\n'.encode()
    misplaced = 'value€x\n1€"a"§\n'.encode()  # § shares no byte with €
    alike = 'value€x\n1€"a"₂\n'.encode()  # ₂ is E2 82 82, € is E2 82 AC
    for block in (1, 2, 3, 4, 5, 7, 64):
        with mock.patch.object(vectorized, "BLOCK_BYTES", block):
            assert vectorized.plan_by_vectors(well_placed, "€", 2) == parity.plan_by_parity(
                well_placed, "€", 2
            )
            assert split(well_placed, "value", "€", 2) == split_exactly(
                well_placed, "value", "€", 2
            )
            assert vectorized.plan_by_vectors(misplaced, "€", 2) is None
            assert vectorized.plan_by_vectors(alike, "€", 2) is None
