"""The compiled summarise (polars) gives exactly the core's summaries, checkpoints and errors."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devstack.sample_csv import generate_csv, generate_export_csv
from services.csvstats import (
    INT64_MAX,
    INT64_MIN,
    SumOverflow,
    columnar,
    merge,
    sequential_totals,
    split,
    summarise,
)
from services.csvstats.syntax import BLANKS, BadValue, read_integer
from tests.unit.test_csvstats_parity import any_case
from tests.unit.test_csvstats_properties import PROPERTY_SETTINGS, CsvCase, block_sizes, blocks_of

pytest.importorskip("polars")


def both_paths(case: CsvCase, plan, column_index: int, sizes, every: int, trust: bool):
    """The core's and the engine's summary of one planned chunk, with their checkpoints."""
    chunk = case.data[plan.byte_start : plan.byte_end]
    options = dict(
        column_index=column_index,
        column="value",
        delimiter=case.delimiter,
        record_start=plan.record_start,
        first_line=plan.first_line,
        checkpoint_every=every,
    )
    core_checkpoints, engine_checkpoints = [], []
    core = summarise(blocks_of(chunk, sizes), on_checkpoint=core_checkpoints.append, **options)
    engine = columnar.summarise_chunk(
        blocks_of(chunk, sizes),
        records=plan.record_end - plan.record_start,
        planned_sha256=plan.sha256 if trust else None,
        on_checkpoint=engine_checkpoints.append,
        **options,
    )
    return (core, core_checkpoints), (engine, engine_checkpoints)


@PROPERTY_SETTINGS
@given(
    case=any_case,
    chunks=st.integers(1, 64),
    sizes=block_sizes,
    every=st.integers(1, 40),
    trust=st.booleans(),
)
def test_every_planned_chunk_gets_the_cores_summary_checkpoints_and_error(
    case, chunks, sizes, every, trust
):
    try:
        result = split(case.data, "value", case.delimiter, chunks)
    except ValueError:
        return  # split rejected the file: no chunk is ever summarised
    for plan in result.plans:
        core, engine = both_paths(case, plan, result.column_index, sizes, every, trust)
        assert engine == core


@PROPERTY_SETTINGS
@given(
    case=any_case,
    column_index=st.integers(0, 4),
    claimed=st.sampled_from([0, 0, 0, -1, 1]),
    sizes=block_sizes,
)
def test_bytes_split_never_saw_get_the_cores_summary(case, column_index, claimed, sizes):
    # Any bytes at all after the header line (a bad quote, a lone CR, an empty line, a short
    # record), with the right record count or a wrong one, and no plan digest to trust.
    data = case.data.split(b"\n", 1)[-1]
    options = dict(column_index=column_index, column="value", delimiter=case.delimiter)
    core = summarise(blocks_of(data, sizes), **options)
    engine = columnar.summarise_chunk(
        blocks_of(data, sizes), records=core.records + claimed, **options
    )
    assert engine == core


def test_the_export_sample_is_summarised_by_polars_and_equals_the_control():
    data = generate_export_csv(20_000, seed=3)
    result = split(data, "value", ",", 8)
    summaries = []
    for plan in result.plans:
        chunk = data[plan.byte_start : plan.byte_end]
        records = plan.record_end - plan.record_start
        assert columnar.compiled_column(chunk, records, 2, ",", plan.sha256) is not None
        assert columnar.compiled_column(chunk, records, 2, ",") is not None  # the quote walk
        summaries.append(
            columnar.summarise_chunk(
                [chunk], records=records, planned_sha256=plan.sha256, column_index=2, column="value"
            )
        )
    assert merge(result.plans, summaries) == sequential_totals(data, "value")


def test_bytes_the_reader_verified_are_not_hashed_again_and_keep_the_planned_digest(
    monkeypatch,
):
    data = generate_export_csv(2_000, seed=4)
    (plan,) = split(data, "value", ",", 1).plans
    chunk = data[plan.byte_start : plan.byte_end]
    records = plan.record_end - plan.record_start
    options = {"records": records, "planned_sha256": plan.sha256, "column_index": 2}
    unverified = columnar.summarise_chunk([chunk], column="value", **options)
    monkeypatch.setattr(columnar.hashlib, "sha256", None)  # any hash now fails

    verified = columnar.summarise_chunk([chunk], column="value", verified=True, **options)

    assert verified == unverified and verified.digest == plan.sha256


@pytest.mark.parametrize("missing", ["polars", "numpy"])
def test_without_either_engine_module_every_chunk_goes_to_the_core_with_identical_results(
    monkeypatch, missing
):
    data = generate_csv(5_000, seed=8) + generate_export_csv(5_000, seed=8).split(b"\n", 1)[1]
    result = split(data, "value", ",", 8)

    def run() -> list:
        return [
            columnar.summarise_chunk(
                [data[p.byte_start : p.byte_end]],
                records=p.record_end - p.record_start,
                planned_sha256=p.sha256,
                column_index=result.column_index,
                column="value",
            )
            for p in result.plans
        ]

    with_both = run()
    monkeypatch.setitem(sys.modules, missing, None)  # importing it raises ImportError
    columnar.engine.cache_clear()
    try:
        assert columnar.engine() is None
        without = run()
    finally:
        columnar.engine.cache_clear()
    assert without == with_both
    assert merge(result.plans, without) == sequential_totals(data, "value")


def test_without_polars_a_chunks_blocks_stream_to_the_core_unjoined(monkeypatch):
    data = generate_csv(1_000, seed=3)
    result = split(data, "value", ",", 1)
    [plan] = result.plans
    chunk = data[plan.byte_start : plan.byte_end]
    handed = []

    def core(blocks, **kwargs):
        handed.append(blocks)
        return summarise(blocks, **kwargs)

    monkeypatch.setattr(columnar, "summarise", core)
    monkeypatch.setitem(sys.modules, "polars", None)  # import polars raises ImportError
    columnar.engine.cache_clear()
    blocks = (chunk[i : i + 4096] for i in range(0, len(chunk), 4096))
    try:
        summary = columnar.summarise_chunk(
            blocks,
            records=plan.record_end - plan.record_start,
            column_index=result.column_index,
            column="value",
        )
    finally:
        columnar.engine.cache_clear()

    assert handed == [blocks]
    assert merge(result.plans, [summary]) == sequential_totals(data, "value")


def test_a_sum_that_leaves_int64_fails_in_the_same_chunk_as_the_sequential_loop():
    rows = "".join(f"{i},{INT64_MAX // 3}\n" for i in range(12)).encode()
    data = b"id,value\n" + rows
    result = split(data, "value", ",", 4)
    summaries = [
        columnar.summarise_chunk(
            [data[p.byte_start : p.byte_end]],
            records=p.record_end - p.record_start,
            planned_sha256=p.sha256,
            column_index=1,
            column="value",
        )
        for p in result.plans
    ]
    with pytest.raises(SumOverflow) as overflow:
        merge(result.plans, summaries)
    assert overflow.value.chunk_index == 1  # records 4-6 carry the running sum past INT64_MAX
    with pytest.raises(SumOverflow):
        sequential_totals(data, "value")


@pytest.mark.parametrize(
    "body, reason",
    [
        (b"1,2\n3,1.5\n", "not an integer"),
        (b"1,2\n3\n", "too few"),
        (b"1,2\n3,99999999999999999999\n", "out of int64 range"),
        (b'1,2\n3,"4"5\n', "misplaced quote"),
    ],
)
def test_a_bad_value_names_the_same_record_and_line_as_the_core(body, reason):
    data = b'"multi\nline",5\n' + body
    options = dict(column_index=1, column="value", record_start=10, first_line=20)
    core = summarise([data], **options)
    engine = columnar.summarise_chunk([data], records=core.records, **options)
    assert engine == core
    assert reason in engine.error.reason
    assert (engine.error.record, engine.error.line) == (13, 23)


@pytest.mark.parametrize(
    "body",
    [
        b'1,"a,b",3\n2,x\n3,"c\nd",5\n',  # a short record in the middle
        b'1,"a,b",3\n2,"c\nd",4\n3,x\n',  # a short record at the end
        b'1,"a,b",3\n2,"c\nd",4\n3,x',  # a short record at the end, unterminated
        b'1,"a,b",3\n2,x,4,y\n3,"c\nd",5\n',  # a long record in the middle
        b'1,"a,b",3\n2,"c\nd",4\n3,x,5,\n',  # a long record at the end
        b'1,"a,b",3\n2,"c\nd",4\n3,x,5,',  # a long one at the end, unterminated
        b"1,x,3\n2,x\n3,x,5,6\n",  # a short and a long record: the delimiters add up
        b"1,x,3\n\n3,x,5\n",  # an empty line
    ],
)
def test_a_record_wider_or_narrower_than_the_first_goes_to_the_core(body):
    # A read of the value column alone pads a short record and reads past a long one without
    # an error, so the engine must see the ragged record for itself.
    options = dict(column_index=2, column="value", record_start=4, first_line=9)
    core = summarise([body], **options)
    assert columnar.compiled_column(body, 3, 2, ",") is None  # every body holds 3 records
    assert columnar.summarise_chunk([body], records=3, **options) == core


ragged_fields = st.one_of(
    st.integers(-999, 999).map(str),
    st.sampled_from(["", " ", " 7 ", '"8"', '" -9 "', '""', '"a,b"', '"c\nd"', '"e""f"', "x"]),
)


@PROPERTY_SETTINGS
@given(
    rows=st.lists(st.lists(ragged_fields, min_size=1, max_size=5), min_size=1, max_size=12),
    column_index=st.integers(0, 4),
    terminator=st.sampled_from(["\n", "\r\n"]),
    terminated=st.booleans(),
)
def test_records_of_any_widths_get_the_cores_summary(rows, column_index, terminator, terminated):
    # Short, long and empty records anywhere among others, quoted delimiters and line breaks:
    # where the value column alone would hide a ragged record, the engine must decline.
    body = terminator.join(",".join(fields) for fields in rows) + (terminator if terminated else "")
    data = body.encode()
    options = dict(column_index=column_index, column="value")
    core = summarise([data], **options)
    engine = columnar.summarise_chunk([data], records=len(rows), **options)
    assert engine == core


def test_a_quote_left_open_at_a_planned_chunks_end_goes_to_the_core():
    # split() plans it (only summarise names an unterminated quote), so the plan's digest does
    # not prove every quote closed; read alone, the value column would look empty.
    data = b'"value"\n' + b"\n" * 24 + b',"'
    result = split(data, "value", ",", 7)
    plan = result.plans[-1]
    chunk = data[plan.byte_start : plan.byte_end]
    assert chunk == b',"'
    core = summarise([chunk], column_index=0, column="value", record_start=plan.record_start)
    assert core.error.reason == "unterminated quote"
    assert columnar.compiled_column(chunk, 1, 0, ",", plan.sha256) is None
    engine = columnar.summarise_chunk(
        [chunk],
        records=1,
        planned_sha256=plan.sha256,
        column_index=0,
        column="value",
        record_start=plan.record_start,
    )
    assert engine == core


@pytest.mark.parametrize(
    "body, column_index",
    [
        (b'"a,b",1,"x\n,y"\n"c,,d",2,","\n', 1),  # delimiters inside quotes are not fields
        (b'1,"a ""b"", c"\r\n2,"d,e"\r\n', 0),  # doubled quotes and CRLFs
        (b"5\n-6\n 7 \n", 0),  # one column
        (b'x,"1"\ny," 2 "\nz,\n', 1),  # quoted, padded and empty values
    ],
)
def test_records_as_wide_as_the_first_are_read_by_polars_as_the_core_reads_them(body, column_index):
    options = dict(column_index=column_index, column="value")
    core = summarise([body], **options)
    assert columnar.compiled_column(body, core.records, column_index, ",") is not None
    assert columnar.summarise_chunk([body], records=core.records, **options) == core


near_integers = st.one_of(
    st.text(
        st.sampled_from([*"0123456789+-_ \t.eExb,", "\u0661", "\uff15", "\u00a0"]), max_size=24
    ),
    st.integers(2 * INT64_MIN, 2 * INT64_MAX).map(str),
    st.integers(INT64_MIN, INT64_MAX).map(lambda value: f"{value:+030d}"),
)


def core_value(text: str) -> int | None:
    """What the core reads from a value that has no blanks around it, None where it refuses."""
    try:
        return read_integer(text) if text and text == text.strip(BLANKS) else None
    except BadValue:
        return None


@PROPERTY_SETTINGS
@given(texts=st.lists(near_integers, max_size=30))
def test_polars_casts_exactly_the_values_the_core_reads_as_integers(texts):
    # The engine relies on it in place of the core's regular expression: a strict cast fails
    # (and the chunk goes to the core) on anything else, signs, digits or range.
    pl, _ = columnar.engine()
    values = pl.Series(texts, dtype=pl.String).cast(pl.Int64, strict=False).to_list()
    assert values == [core_value(text) for text in texts]
