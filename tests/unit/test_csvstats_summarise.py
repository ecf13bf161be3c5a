"""summarise(): values, invalid records with global positions, streaming and checkpoints."""

from __future__ import annotations

import random

import pytest

from devstack.sample_csv import generate_csv, generate_quoted_csv
from services.csvstats import (
    INT64_MAX,
    INT64_MIN,
    BadRecord,
    Checkpoint,
    InvalidRecord,
    Summary,
    merge,
    sequential_totals,
    split,
    summarise,
)


def summarise_body(body: bytes, column_index: int = 1, **options) -> Summary:
    """Summarise `body` (the records after a header) as one chunk, column "value"."""
    return summarise([body], column_index=column_index, column="value", **options)


def one_byte_blocks(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


@pytest.mark.parametrize(
    ("body", "count", "total", "low", "high"),
    [
        (b"a,5\nb,-3\nc,10\n", 3, 12, -3, 10),
        (b"a,\nb,  \nc,\t\nd,7\n", 1, 7, 7, 7),
        (b"a, 7 \nb,\t-2\t\nc,+5\nd,-0\ne,007\n", 5, 17, -2, 7),
        (b'a,"42"\nb," -1 "\nc,""\n', 2, 41, -1, 42),
        (b"a,5\n\nb,6\n", 2, 11, 5, 6),
        (f"a,{INT64_MAX}\nb,{INT64_MIN}\n".encode(), 2, -1, INT64_MIN, INT64_MAX),
        (b"a,1\r\nb,2\r\n", 2, 3, 1, 2),
        (b"a,1\rb,2\r", 2, 3, 1, 2),
        (b"a,1\nb,2", 2, 3, 1, 2),
        (b'x,1,"multi\nline, with ""quotes"""\ny,2,z\n', 2, 3, 1, 2),
        (b"", 0, 0, None, None),
    ],
    ids=[
        "negatives",
        "empty-and-blank-values-skipped",
        "padding-signs-and-zeros",
        "quoted-values",
        "empty-line-is-a-record-without-a-value",
        "int64-extremes",
        "crlf",
        "lone-cr",
        "no-final-newline",
        "quoted-multiline-field",
        "no-records",
    ],
)
def test_statistics_of_valid_values(body, count, total, low, high):
    summary = summarise_body(body)
    assert (summary.count, summary.sum, summary.min, summary.max) == (count, total, low, high)
    assert summary.error is None


def test_records_counts_every_record_including_empty_values():
    assert summarise_body(b"a,1\nb,\n\nc,  \n").records == 4


def test_prefix_extremes_are_relative_to_the_chunk_start_and_include_zero():
    summary = summarise_body(b"a,5\nb,-10\nc,3\n")
    assert (summary.sum, summary.min_prefix, summary.max_prefix) == (-2, -5, 5)
    rising = summarise_body(b"a,1\nb,2\n")
    assert (rising.min_prefix, rising.max_prefix) == (0, 3)


def test_a_large_prefix_inside_a_chunk_shows_in_its_extremes_even_if_the_sum_is_small():
    summary = summarise_body(f"a,{INT64_MAX}\nb,{INT64_MAX}\nc,{INT64_MIN}\n".encode())
    assert summary.max_prefix == 2 * INT64_MAX
    assert summary.sum == INT64_MAX - 1


@pytest.mark.parametrize(
    ("value", "reason", "excerpt"),
    [
        ("1.5", "not an integer", "'1.5'"),
        ("abc", "not an integer", "'abc'"),
        (" 1 2 ", "not an integer", "' 1 2 '"),
        ("1_000", "not an integer", "'1_000'"),
        ("\u0663", "not an integer", "'\u0663'"),
        ("+", "not an integer", "'+'"),
        ("0x10", "not an integer", "'0x10'"),
        ("\x0b5", "not an integer", "'\\x0b5'"),
        ("9223372036854775808", "out of int64 range", "'9223372036854775808'"),
        ("-9223372036854775809", "out of int64 range", "'-9223372036854775809'"),
        ("1" * 5000, "out of int64 range", "'" + "1" * 35 + "'..."),
    ],
    ids=[
        "decimal",
        "word",
        "inner-blank",
        "underscore",
        "arabic-indic-digit",
        "sign-only",
        "hex",
        "vertical-tab",
        "above-int64",
        "below-int64",
        "five-thousand-digits",
    ],
)
def test_invalid_value_names_record_line_column_and_an_escaped_excerpt(value, reason, excerpt):
    body = f"a,1\nb,2\nc,{value}\nd,4\n".encode()
    summary = summarise_body(body, record_start=10, first_line=20)
    assert summary.error == InvalidRecord(
        record=13, line=22, column="value", reason=reason, excerpt=excerpt
    )
    assert len(summary.error.excerpt) <= 40


def test_invalid_record_message_reads_like_a_sentence():
    summary = summarise_body(b"a,1\nb,1.5\n", record_start=15, first_line=18)
    assert summary.error.message() == "record 17 (line 19), column 'value': not an integer: '1.5'"


@pytest.mark.parametrize(
    ("body", "reason", "record", "line"),
    [
        (b"a,1\nb\nc,3\n", "too few fields (1; the column is field 2)", 2, 3),
        (b'a,1\n"b\nc",2\nd,"3\n4\n', "unterminated quote", 3, 5),
        (b"a,1\nb\xff,2\n", "invalid UTF-8", 2, 3),
        (b'a,1\nb"x,2\n', "misplaced quote", 2, 3),
        (b'a,1\r\nb,2,"x\r\ny"\rd,2\r\ne"f,3\n', "misplaced quote", 4, 6),
    ],
    ids=[
        "too-few-fields",
        "unterminated-quote",
        "invalid-utf8",
        "quote-in-unquoted-field",
        "lines-counted-across-cr-crlf-lf",
    ],
)
def test_malformed_records_are_invalid_with_their_position(body, reason, record, line):
    summary = summarise_body(body)
    assert summary.error.reason == reason
    assert (summary.error.record, summary.error.line) == (record, line)


def test_statistics_cover_only_the_records_before_the_invalid_one():
    body = b"a,5\nb,7\nc,oops\nd,100\n"
    summary = summarise_body(body)
    assert (summary.records, summary.count, summary.sum, summary.max) == (2, 2, 12, 7)
    assert summary.max_prefix == 12


def test_the_digest_covers_every_byte_even_after_an_invalid_record():
    body = b"a,oops\n" + b"b,1\n" * 50_000
    first = summarise_body(body)
    changed = summarise_body(body[:-2] + b"2\n")
    assert first.error is not None
    assert first.digest != changed.digest
    assert len(first.digest) == 64


def test_blocks_may_split_records_and_multibyte_characters():
    body = 'é,1\n"ü\r\n§",2\r\n€,3\r"x",-4\n'.encode()
    assert summarise([body], column_index=1, column="value") == summarise(
        one_byte_blocks(body), column_index=1, column="value"
    )


def test_a_cr_at_the_end_of_a_block_may_start_a_crlf():
    blocks = [b"a,1\r", b"\nb,2\r", b"\r\nc,3"]
    summary = summarise(blocks, column_index=1, column="value", first_line=2)
    assert (summary.records, summary.sum) == (4, 6)  # the CR alone ends an empty record
    bad = summarise([b"a,1\r", b"\nb,x\r\n"], column_index=1, column="value")
    assert bad.error.line == 3


def test_a_field_larger_than_a_batch_or_the_csv_module_limit_is_read_whole():
    note = "x" * 300_000
    data = f'id,note,value\n1,"{note}\n{note}",5\n2,y,6\n'.encode()
    result = split(data, "value", chunks=2)
    summaries = [
        summarise(
            [data[p.byte_start : p.byte_end]],
            column_index=2,
            column="value",
            record_start=p.record_start,
            first_line=p.first_line,
        )
        for p in result.plans
    ]
    assert merge(result.plans, summaries) == sequential_totals(data, "value")
    assert summaries[1].count == 1


@pytest.mark.parametrize(
    "delimiter",
    [",", ";", "\t", " ", "\u00a7"],
    ids=["comma", "semicolon", "tab", "space", "non-ascii"],
)
def test_each_delimiter_gives_the_sequential_totals_over_many_batches(delimiter):
    rng = random.Random(4)
    rows = [
        f'{i}{delimiter}"la{delimiter}bel"{delimiter}{rng.choice(["", rng.randint(-9, 99)])}'
        f'{delimiter}"n""o{delimiter}\nte"'
        for i in range(20_000)
    ]
    data = (
        "id" + delimiter + "label" + delimiter + "value" + delimiter + "note\n" + "\r\n".join(rows)
    ).encode()
    result = split(data, "value", delimiter, chunks=5)
    summaries = [
        summarise(
            [data[p.byte_start : p.byte_end]],
            column_index=2,
            column="value",
            delimiter=delimiter,
            record_start=p.record_start,
            first_line=p.first_line,
        )
        for p in result.plans
    ]
    assert merge(result.plans, summaries) == sequential_totals(data, "value", delimiter)


def test_a_generated_file_with_a_malformed_record_is_reported_like_the_sequential_loop():
    data = generate_csv(3_000, seed=9, malformed_at=2_222)
    result = split(data, "value", chunks=4)
    summaries = [
        summarise(
            [data[p.byte_start : p.byte_end]],
            column_index=2,
            column="value",
            record_start=p.record_start,
            first_line=p.first_line,
        )
        for p in result.plans
    ]
    errors = [s.error for s in summaries if s.error is not None]
    assert [e.record for e in errors] == [2_222]
    with pytest.raises(BadRecord) as sequential:
        sequential_totals(data, "value")
    assert sequential.value.record == errors[0]


@pytest.mark.parametrize("chunks", [1, 2, 7, 8, 64])
def test_the_quote_heavy_sample_gives_the_sequential_totals_for_any_chunk_count(chunks):
    data = generate_quoted_csv(6_000, seed=11)
    result = split(data, "value", chunks=chunks)
    summaries = [
        summarise(
            [data[p.byte_start : p.byte_end]],
            column_index=2,
            column="value",
            record_start=p.record_start,
            first_line=p.first_line,
        )
        for p in result.plans
    ]
    assert merge(result.plans, summaries) == sequential_totals(data, "value")


def test_a_bad_value_in_the_quote_heavy_sample_is_found_at_its_record_and_line():
    data = generate_quoted_csv(3_000, seed=12)
    # Record 2,500 starts after 2,500 terminators and every line break quoted before it.
    start = data.index(b"\n2500,")
    record = data[start + 1 :].split(b",", 3)
    bad = data[: start + 1] + b",".join([record[0], record[1], b"1.5", record[3]])
    result = split(bad, "value", chunks=8)
    summaries = [
        summarise(
            [bad[p.byte_start : p.byte_end]],
            column_index=2,
            column="value",
            record_start=p.record_start,
            first_line=p.first_line,
        )
        for p in result.plans
    ]
    errors = [s.error for s in summaries if s.error is not None]
    with pytest.raises(BadRecord) as sequential:
        sequential_totals(bad, "value")
    assert sequential.value.record.record == 2_500
    assert errors[0] == sequential.value.record
    assert errors[0].line == 2 + 2_499 + bad[:start].count(b'\nx"')


def test_checkpoints_come_every_n_records_with_the_statistics_so_far():
    seen: list[Checkpoint] = []
    summarise_body(b"a,1\nb,2\nc,\nd,4\ne,5\n", checkpoint_every=2, on_checkpoint=seen.append)
    assert [(c.records_done, c.partial.count, c.partial.sum) for c in seen] == [
        (2, 2, 3),
        (4, 3, 7),
    ]
    assert all(c.partial.digest == "" for c in seen)


def test_no_checkpoint_is_taken_past_an_invalid_record():
    seen: list[Checkpoint] = []
    summarise_body(b"a,1\nb,2\nc,x\nd,4\ne,5\n", checkpoint_every=1, on_checkpoint=seen.append)
    assert [c.records_done for c in seen] == [1, 2]


def test_an_exception_from_on_checkpoint_propagates():
    class Cancelled(Exception):
        pass

    def cancel(checkpoint: Checkpoint) -> None:
        raise Cancelled

    with pytest.raises(Cancelled):
        summarise_body(b"a,1\n" * 10, checkpoint_every=3, on_checkpoint=cancel)


def test_resuming_from_a_checkpoint_gives_the_uninterrupted_summary():
    body = generate_csv(5_000, seed=2)
    body = body[body.index(b"\n") + 1 :]
    seen: list[Checkpoint] = []
    whole = summarise(
        [body], column_index=2, column="value", checkpoint_every=700, on_checkpoint=seen.append
    )
    for checkpoint in seen:
        saved = Checkpoint.from_dict(checkpoint.to_dict())
        later: list[Checkpoint] = []
        resumed = summarise(
            one_byte_blocks(body[:3000]) + [body[3000:]],
            column_index=2,
            column="value",
            checkpoint_every=700,
            checkpoint=saved,
            on_checkpoint=later.append,
        )
        assert resumed == whole
        assert later == [c for c in seen if c.records_done > checkpoint.records_done]


def test_resuming_skips_the_checkpointed_records_without_reading_their_values():
    partial = Summary(
        records=2, count=1, sum=9, min=9, max=9, min_prefix=0, max_prefix=9, digest=""
    )
    summary = summarise_body(
        b"a,1\nb,not-read\nc,4\n", checkpoint=Checkpoint(records_done=2, partial=partial)
    )
    assert (summary.records, summary.count, summary.sum, summary.error) == (3, 2, 13, None)


def test_a_checkpoint_past_the_end_of_the_chunk_is_rejected():
    partial = Summary(
        records=5, count=0, sum=0, min=None, max=None, min_prefix=0, max_prefix=0, digest=""
    )
    with pytest.raises(ValueError, match="checkpoint"):
        summarise_body(b"a,1\n", checkpoint=Checkpoint(records_done=5, partial=partial))


@pytest.mark.parametrize(
    "options",
    [{"checkpoint_every": 0}, {"column_index": -1}, {"delimiter": '"'}],
    ids=["checkpoint-every-zero", "negative-column", "quote-delimiter"],
)
def test_bad_arguments_are_rejected(options):
    with pytest.raises(ValueError):
        summarise_body(b"a,1\n", **options)


def test_summary_round_trips_through_a_dict_with_or_without_an_error():
    good = summarise_body(b"a,1\nb,-2\n")
    bad = summarise_body(b"a,1\nb,x\n")
    for summary in (good, bad):
        assert Summary.from_dict(summary.to_dict()) == summary
    assert bad.to_dict()["error"]["reason"] == "not an integer"


VALID_SUMMARY = {
    "records": 3,
    "count": 2,
    "sum": 5,
    "min": 1,
    "max": 4,
    "min_prefix": 0,
    "max_prefix": 5,
    "digest": "a" * 64,
    "error": None,
}


@pytest.mark.parametrize(
    "change",
    [
        {"records": "3"},
        {"count": True},
        {"count": 4},
        {"min": None},
        {"max": 1.0},
        {"min": 5},
        {"min_prefix": 1},
        {"max_prefix": 4},
        {"digest": "xyz"},
        {"min": INT64_MAX + 1, "max": INT64_MAX + 1},
        {"error": {"record": 1}},
        {"surprise": 1},
        {"sum": 10**4299, "max_prefix": 10**4299},
        {"sum": 9, "max_prefix": 9},
        {"min_prefix": -(10**4299)},
        {"max_prefix": 10**4299},
    ],
    ids=[
        "string-records",
        "bool-count",
        "count-above-records",
        "min-missing-with-values",
        "float-max",
        "min-above-max",
        "min-prefix-above-zero",
        "max-prefix-below-sum",
        "bad-digest",
        "min-beyond-int64",
        "malformed-error",
        "unknown-key",
        "sum-no-column-could-have",
        "sum-above-count-times-max",
        "min-prefix-below-count-times-min",
        "max-prefix-above-count-times-max",
    ],
)
def test_summary_from_dict_rejects_malformed_input(change):
    with pytest.raises(ValueError):
        Summary.from_dict({**VALID_SUMMARY, **change})


def test_summary_from_dict_rejects_a_missing_key_and_a_non_object():
    with pytest.raises(ValueError):
        Summary.from_dict({k: v for k, v in VALID_SUMMARY.items() if k != "sum"})
    with pytest.raises(ValueError):
        Summary.from_dict([1, 2])


def test_checkpoint_from_dict_requires_a_partial_covering_records_done():
    partial = Summary.from_dict({**VALID_SUMMARY, "digest": ""})
    assert Checkpoint.from_dict({"records_done": 3, "partial": partial.to_dict()}).partial == (
        partial
    )
    with pytest.raises(ValueError):
        Checkpoint.from_dict({"records_done": 4, "partial": partial.to_dict()})
