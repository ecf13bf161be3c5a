"""merge(): exact checked-int64 totals, the first error in file order, and summary validation."""

from __future__ import annotations

import dataclasses

import pytest

from services.csvstats import (
    INT64_MAX,
    INT64_MIN,
    BadRecord,
    MergeError,
    SumOverflow,
    Totals,
    merge,
    partial_totals,
    sequential_totals,
    split,
    summarise,
)


def csv_of(values: list) -> bytes:
    return ("id,value\n" + "".join(f"{i},{v}\n" for i, v in enumerate(values))).encode()


def summarised(values: list, chunks: int):
    """Split a one-column file of these values and summarise every chunk."""
    data = csv_of(values)
    result = split(data, "value", chunks=chunks)
    summaries = [
        summarise(
            [data[p.byte_start : p.byte_end]],
            column_index=1,
            column="value",
            record_start=p.record_start,
            first_line=p.first_line,
        )
        for p in result.plans
    ]
    return result.plans, summaries


@pytest.mark.parametrize("chunks", [1, 2, 3, 7, 64])
def test_totals_do_not_depend_on_the_chunk_count(chunks):
    values = [5, -3, "", 12, " 7 ", -40, 0, 9, "", 1]
    plans, summaries = summarised(values, chunks)
    assert merge(plans, summaries) == Totals(count=8, sum=-9, min=-40, max=12)


@pytest.mark.parametrize("values", [[], ["", " "]], ids=["no-records", "only-empty-values"])
def test_an_empty_data_set_totals_zero_with_no_min_or_max(values):
    plans, summaries = summarised(values, 4)
    assert merge(plans, summaries) == Totals(count=0, sum=0, min=None, max=None)


@pytest.mark.parametrize(
    ("values", "chunks", "overflow_chunk"),
    [
        ([INT64_MAX, 1], 2, 1),
        ([INT64_MAX, 1, -1], 3, 1),
        ([INT64_MAX, 1, -1], 1, 0),
        ([INT64_MIN, -1, 5], 1, 0),
        ([2**62, 2**62, -(2**62), 0], 2, 0),
        ([-5, INT64_MIN + 10, -6, 0], 2, 1),
        ([1, 2, 3, INT64_MAX - 6, 1, -100], 3, 2),
    ],
    ids=[
        "across-chunks",
        "cancels-out-in-a-later-chunk",
        "cancels-out-inside-one-chunk",
        "negative-inside-one-chunk",
        "mid-chunk-partial-sum",
        "negative-across-chunks",
        "one-past-max-late",
    ],
)
def test_overflow_fails_in_the_chunk_where_the_sequential_loop_overflows(
    values, chunks, overflow_chunk
):
    plans, summaries = summarised(values, chunks)
    with pytest.raises(SumOverflow) as caught:
        merge(plans, summaries)
    assert caught.value.chunk_index == overflow_chunk
    with pytest.raises(SumOverflow):
        sequential_totals(csv_of(values), "value")


@pytest.mark.parametrize(
    ("values", "total"),
    [
        ([INT64_MAX], INT64_MAX),
        ([INT64_MIN], INT64_MIN),
        ([INT64_MAX, INT64_MIN, INT64_MAX], INT64_MAX - 1),
        ([INT64_MAX - 1, 1, -5, 5], INT64_MAX),
        ([INT64_MIN + 1, -1], INT64_MIN),
    ],
    ids=["max", "min", "swinging", "touching-max", "touching-min"],
)
def test_sums_that_stay_within_int64_at_every_step_succeed(values, total):
    for chunks in (1, 2, len(values)):
        plans, summaries = summarised(values, chunks)
        assert merge(plans, summaries).sum == total


@pytest.mark.parametrize("chunks", [1, 3])
def test_an_overflow_before_an_invalid_record_wins(chunks):
    plans, summaries = summarised([INT64_MAX, 1, "x"], chunks)
    with pytest.raises(SumOverflow):
        merge(plans, summaries)


@pytest.mark.parametrize("chunks", [1, 3])
def test_an_invalid_record_before_an_overflow_wins(chunks):
    plans, summaries = summarised([INT64_MAX, "x", 1], chunks)
    with pytest.raises(BadRecord) as caught:
        merge(plans, summaries)
    assert (caught.value.record.record, caught.value.record.line) == (2, 3)
    assert caught.value.chunk_index == (0 if chunks == 1 else 1)


def test_the_first_invalid_record_in_file_order_is_reported():
    plans, summaries = summarised([1, 2, "x", 4, "y", "z"], 3)
    with pytest.raises(BadRecord) as caught:
        merge(plans, summaries)
    assert caught.value.record.record == 3
    assert caught.value.chunk_index == 1
    assert str(caught.value) == "record 3 (line 4), column 'value': not an integer: 'x'"


def test_summaries_after_the_first_error_may_be_absent():
    plans, summaries = summarised([1, "x", 3, 4, 5, 6], 3)
    with pytest.raises(BadRecord) as caught:
        merge(plans, summaries[:1])
    assert caught.value.record.record == 2


def test_all_summaries_are_needed_when_none_has_an_error():
    plans, summaries = summarised([1, 2, 3], 3)
    with pytest.raises(MergeError) as caught:
        merge(plans, summaries[:2])
    assert caught.value.chunk_index == 2


def _with(summaries, index, **changes):
    changed = list(summaries)
    changed[index] = dataclasses.replace(changed[index], **changes)
    return changed


@pytest.mark.parametrize(
    ("mangle", "chunk_index", "words"),
    [
        (lambda s: s + [s[0]], 3, "4 summaries for 3 chunks"),
        (lambda s: [s[1], s[0], s[2]], 0, "it is chunk 1's"),
        (lambda s: _with(s, 1, digest="0" * 64), 1, "digest"),
        (lambda s: _with(s, 2, records=2), 2, "covers 2 records"),
        (lambda s: s[:0], 0, "summary missing"),
    ],
    ids=["extra", "out-of-order", "digest-mismatch", "wrong-record-count", "none"],
)
def test_summaries_that_do_not_match_the_plans_are_a_merge_error(mangle, chunk_index, words):
    plans, summaries = summarised([1, 2, 3], 3)
    with pytest.raises(MergeError, match=words) as caught:
        merge(plans, mangle(summaries))
    assert caught.value.chunk_index == chunk_index


def test_an_error_that_is_not_the_record_after_the_summarised_ones_is_a_merge_error():
    plans, summaries = summarised([1, "x", 3], 1)
    wrong = _with(summaries, 0, records=0)
    with pytest.raises(MergeError, match="invalid record 2"):
        merge(plans, wrong)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda p: [],
        lambda p: [p[1], p[0]],
        lambda p: [p[0], dataclasses.replace(p[1], record_start=5)],
    ],
    ids=["no-plans", "plans-out-of-order", "plans-with-a-gap"],
)
def test_plans_must_be_contiguous_from_record_zero(mangle):
    plans, summaries = summarised([1, 2], 2)
    with pytest.raises(MergeError):
        merge(mangle(plans), summaries)


def test_partial_totals_add_exactly_without_an_overflow_check():
    _, summaries = summarised([INT64_MAX, INT64_MAX, -3], 3)
    assert partial_totals(summaries[:2]) == Totals(2, 2 * INT64_MAX, INT64_MAX, INT64_MAX)
    assert partial_totals([]) == Totals(0, 0, None, None)


def test_totals_to_dict_is_json_ready():
    assert Totals(2, 7, -1, 8).to_dict() == {"count": 2, "sum": 7, "min": -1, "max": 8}
