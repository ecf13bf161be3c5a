"""split(): record boundaries by quote parity, chunk plans, and submission-time errors."""

from __future__ import annotations

import csv
import hashlib
import io

import pytest

from devstack.sample_csv import generate_csv
from services.csvstats import ChunkPlan, CsvFormatError, split, validate_delimiter


def plans_as_ranges(result) -> list[tuple[int, int]]:
    return [(p.record_start, p.record_end) for p in result.plans]


def records_of(data: bytes, plan: ChunkPlan) -> list[list[str]]:
    text = data[plan.byte_start : plan.byte_end].decode("utf-8")
    return list(csv.reader(io.StringIO(text, newline="")))


@pytest.mark.parametrize("line_break", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])
def test_quoted_newline_does_not_end_a_record(line_break):
    data = f'id,value,note\n1,5,"two{line_break}lines"\n2,6,x\n'.encode()
    result = split(data, "value", chunks=2)
    assert result.records == 2
    assert plans_as_ranges(result) == [(0, 1), (1, 2)]
    assert result.plans[1].first_line == 4  # the header, then a record on two lines
    assert records_of(data, result.plans[0]) == [["1", "5", f"two{line_break}lines"]]


@pytest.mark.parametrize(
    "field",
    ['"a,b"', '"say ""hi"""', '"a,""b"",\nc"', '""'],
    ids=["delimiter", "doubled-quotes", "all-at-once", "empty"],
)
def test_quoted_delimiters_and_doubled_quotes_stay_inside_their_field(field):
    data = f"id,note,value\n1,{field},5\n2,x,6\n".encode()
    result = split(data, "value", chunks=2)
    assert result.records == 2
    assert records_of(data, result.plans[0])[0][2] == "5"


@pytest.mark.parametrize(
    ("records", "chunks", "expected"),
    [
        (10, 3, [(0, 4), (4, 8), (8, 10)]),
        (10, 4, [(0, 3), (3, 6), (6, 9), (9, 10)]),
        (10, 1, [(0, 10)]),
        (3, 8, [(0, 1), (1, 2), (2, 3)]),
        (64, 64, [(i, i + 1) for i in range(64)]),
        (1, 64, [(0, 1)]),
        (0, 5, [(0, 0)]),
    ],
    ids=[
        "last-chunk-incomplete",
        "four-of-three",
        "one-chunk",
        "fewer-chunks-than-asked",
        "one-record-each",
        "one-record",
        "no-records",
    ],
)
def test_chunks_are_ceil_n_over_k_records_each(records, chunks, expected):
    data = ("id,value\n" + "".join(f"{i},{i}\n" for i in range(records))).encode()
    result = split(data, "value", chunks=chunks)
    assert result.records == records
    assert plans_as_ranges(result) == expected
    assert [p.index for p in result.plans] == list(range(len(expected)))


def test_chunks_are_counted_in_records_not_physical_lines():
    data = b'id,value\n1,"a\nb\nc"\n2,x\n3,y\n4,z\n'
    result = split(data, "id", chunks=2)
    assert plans_as_ranges(result) == [(0, 2), (2, 4)]
    assert [len(records_of(data, p)) for p in result.plans] == [2, 2]
    assert [p.first_line for p in result.plans] == [2, 6]


def test_plans_cover_the_body_in_order_with_the_digest_of_their_bytes():
    data = generate_csv(2_000, seed=3)
    result = split(data, "value", chunks=7)
    assert result.plans[0].byte_start == data.index(b"\n") + 1
    assert result.plans[-1].byte_end == len(data)
    for before, after in zip(result.plans, result.plans[1:], strict=False):
        assert before.byte_end == after.byte_start
        assert before.record_end == after.record_start
    for plan in result.plans:
        assert plan.sha256 == hashlib.sha256(data[plan.byte_start : plan.byte_end]).hexdigest()


def test_every_chunk_of_a_generated_file_holds_exactly_its_planned_records():
    data = generate_csv(3_000, seed=11, quoted_multiline_ratio=0.05)
    result = split(data, "value", chunks=9)
    assert result.records == 3_000
    for plan in result.plans:
        rows = records_of(data, plan)
        assert len(rows) == plan.record_end - plan.record_start
        assert rows[0][0] == str(plan.record_start + 1)  # the generator numbers records from 1


def test_first_line_counts_lf_crlf_and_lone_cr_inside_quotes():
    data = b'id,value\r\n1,"a\r\nb\rc\nd"\r\n2,5\r\n'
    result = split(data, "value", chunks=2)
    assert [p.first_line for p in result.plans] == [2, 6]


def test_a_leading_bom_is_skipped_but_offsets_are_into_the_given_bytes():
    data = b"\xef\xbb\xbfvalue,id\n5,1\n"
    result = split(data, "value")
    assert result.header == ("value", "id")
    assert result.column_index == 0
    assert result.plans[0].byte_start == len(b"\xef\xbb\xbfvalue,id\n")


@pytest.mark.parametrize(
    ("delimiter", "data"),
    [
        (";", b'id;value\n1;5\n2;"6;7"\n'),
        ("\t", b'id\tvalue\n1\t5\n2\t"6\t7"\n'),
        ("|", b"id|value\n1|5\n2|6\n"),
        ("\u00a7", "id\u00a7value\n1\u00a75\n2\u00a76\n".encode()),
    ],
    ids=["semicolon", "tab", "pipe", "non-ascii"],
)
def test_other_delimiters_find_the_column_and_the_records(delimiter, data):
    result = split(data, "value", delimiter, chunks=2)
    assert result.column_index == 1
    assert result.records == 2


@pytest.mark.parametrize(
    ("data", "records"),
    [
        (b"id,value\n1,5\n2,6", 2),
        (b"id,value\n1,5\n2,6\n", 2),
        (b"id,value\r\n1,5\r\n2,6\r\n", 2),
        (b"id,value\r1,5\r2,6\r", 2),
        (b"id,value\n1,5\n\n2,6\n", 3),
        (b"id,value\n1,5\n\n", 2),
        (b"id,value", 0),
        (b"id,value\n", 0),
    ],
    ids=[
        "no-final-newline",
        "final-lf",
        "crlf",
        "lone-cr",
        "empty-line-in-the-middle",
        "empty-line-at-the-end",
        "header-only-unterminated",
        "header-only",
    ],
)
def test_record_count_follows_the_line_ending_rules(data, records):
    assert split(data, "value").records == records


def test_a_file_ending_inside_an_open_quote_makes_the_rest_its_last_record():
    data = b'id,value\n1,5\n2,"6\n3,7\n4,8\n'
    result = split(data, "value", chunks=4)
    assert result.records == 2
    assert result.plans[-1].byte_end == len(data)


def test_quoted_header_names_are_unquoted():
    result = split(b'"id","the ""value"""\n1,2\n', 'the "value"')
    assert result.header == ("id", 'the "value"')
    assert result.column_index == 1


@pytest.mark.parametrize(
    ("data", "column", "delimiter", "chunks", "field"),
    [
        (b"", "value", ",", 1, "file"),
        (b"\xef\xbb\xbf", "value", ",", 1, "file"),
        (b"id,value\n1,\xff\n", "value", ",", 1, "file"),
        (b"id,value\n1,\xe2\x82\n", "value", ",", 1, "file"),
        (b'id,value\n1,a"b\n', "value", ",", 1, "file"),
        (b'id,value\n"1"x,5\n', "value", ",", 1, "file"),
        (b'id,"value\n1,5\n', "value", ",", 1, "file"),
        (b"\nid,value\n", "value", ",", 1, "file"),
        (b"id,value\n1,5\n", "amount", ",", 1, "column"),
        (b"value,value\n1,5\n", "value", ",", 1, "column"),
        (b"id,value\n1,5\n", "", ",", 1, "column"),
        (b"id,value\n1,5\n", "value", "", 1, "delimiter"),
        (b"id,value\n1,5\n", "value", ",,", 1, "delimiter"),
        (b"id,value\n1,5\n", "value", '"', 1, "delimiter"),
        (b"id,value\n1,5\n", "value", "\n", 1, "delimiter"),
        (b"id,value\n1,5\n", "value", "\r", 1, "delimiter"),
        (b"id,value\n1,5\n", "value", ",", 0, "chunks"),
        (b"id,value\n1,5\n", "value", ",", 65, "chunks"),
        (b"id,value\n1,5\n", "value", ",", True, "chunks"),
        (b"id,value\n1,5\n", "value", ",", 2.0, "chunks"),
    ],
    ids=[
        "empty",
        "bom-only",
        "invalid-utf8",
        "truncated-utf8",
        "quote-inside-unquoted-field",
        "text-after-closing-quote",
        "header-quote-never-closed",
        "blank-header",
        "column-absent",
        "column-ambiguous",
        "column-empty",
        "delimiter-empty",
        "delimiter-two-chars",
        "delimiter-quote",
        "delimiter-lf",
        "delimiter-cr",
        "chunks-zero",
        "chunks-65",
        "chunks-bool",
        "chunks-float",
    ],
)
def test_unusable_submissions_name_the_bad_field(data, column, delimiter, chunks, field):
    with pytest.raises(CsvFormatError) as caught:
        split(data, column, delimiter, chunks)
    assert caught.value.field == field
    assert caught.value.message


def test_misplaced_quote_error_names_its_line():
    with pytest.raises(CsvFormatError, match="line 4: misplaced quote"):
        split(b'id,value\n1,"two\nlines"\n2,6"\n', "value")


def test_invalid_utf8_error_names_its_byte_and_line():
    with pytest.raises(CsvFormatError, match=r"byte 15 \(line 3\)"):
        split(b"id,value\n1,5\n2,\xff\n", "value")


def test_validate_delimiter_accepts_any_other_single_character():
    for delimiter in [",", ";", "\t", " ", "|", "\u00a7", "\x00"]:
        validate_delimiter(delimiter)


def test_chunk_plan_round_trips_through_a_dict():
    plan = split(b"id,value\n1,5\n2,6\n", "value", chunks=2).plans[1]
    assert ChunkPlan.from_dict(plan.to_dict()) == plan


@pytest.mark.parametrize(
    "change",
    [
        {"index": -1},
        {"record_start": "0"},
        {"sha256": "abc"},
        {"record_end": -5},
        {"byte_start": True},
        {"extra": 1},
    ],
    ids=[
        "negative-index",
        "string-number",
        "short-digest",
        "range-backwards",
        "bool",
        "unknown-key",
    ],
)
def test_chunk_plan_from_dict_rejects_malformed_input(change):
    plan = split(b"id,value\n1,5\n", "value").plans[0].to_dict()
    with pytest.raises(ValueError):
        ChunkPlan.from_dict({**plan, **change})
