"""split by quote parity counts (numpy hidden) plans exactly what the exact scan plans, over
bytes or a memory map."""

from __future__ import annotations

import mmap
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from devstack.sample_csv import generate_export_csv
from services.csvstats import CsvFormatError, parity, split, vectorized
from services.csvstats.planning import split_exactly
from tests.unit.test_csvstats_properties import (
    PROPERTY_SETTINGS,
    CsvCase,
    csv_cases,
    quote_heavy_cases,
)


@st.composite
def export_cases(draw) -> CsvCase:
    """The benchmark's export shape: a multiline quoted field in about 30% of records."""
    records = draw(st.integers(1, 300))
    return CsvCase(generate_export_csv(records, seed=draw(st.integers(0, 10**6))), ",")


@st.composite
def adversarial_quoting(draw) -> CsvCase:
    """A quote-heavy file with quotes, doubled quotes and line breaks put anywhere."""
    case = draw(quote_heavy_cases(malformed=False))
    data = case.data
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        junk = draw(st.sampled_from([b'"', b'""', b'x"y', b'"\n', b'\n"', b"\r", b"\n\n", b'",']))
        data = data[:at] + junk + data[at:]
    return CsvCase(data, case.delimiter)


any_case = st.one_of(csv_cases(), quote_heavy_cases(), export_cases(), adversarial_quoting())


@PROPERTY_SETTINGS
@given(case=any_case, chunks=st.integers(1, 64), block=st.sampled_from([1, 2, 5, 64, 1 << 20]))
def test_split_by_quote_parity_plans_what_the_exact_scan_plans(case, chunks, block):
    # Tiny blocks put a block boundary inside quoted fields, CRLFs and UTF-8 characters.
    with (
        mock.patch.object(vectorized, "engine", lambda: None),
        mock.patch.object(parity, "BLOCK_BYTES", block),
        mock.patch.object(parity, "_STEP_BYTES", max(1, block // 3)),
    ):
        planned = parity.plan_by_parity(case.data, case.delimiter, chunks)
        try:
            fast = ("plan", split(case.data, "value", case.delimiter, chunks))
        except CsvFormatError as exc:
            fast = ("format", str(exc))
    try:
        exact = ("plan", split_exactly(case.data, "value", case.delimiter, chunks))
    except CsvFormatError as exc:
        exact = ("format", str(exc))
    assert fast == exact
    if exact[0] == "plan" and case.data.count(b'"') % 2 == 0:
        # A file split accepts is planned by parity, not the scan, unless it ends in an open
        # quote (which split leaves for the chunk's summary to report).
        assert planned is not None


def test_split_reads_a_memory_map_of_the_spool_like_its_bytes(tmp_path):
    data = generate_export_csv(3_000, seed=4)
    path = tmp_path / "upload.csv"
    path.write_bytes(data)
    with (
        path.open("rb") as f,
        mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
        mock.patch.object(vectorized, "engine", lambda: None),
    ):
        assert split(mapped, "value", ",", 7) == split_exactly(data, "value", ",", 7)
