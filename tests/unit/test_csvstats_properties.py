"""Properties: the chunked path agrees with one sequential csv.reader pass, on any CSV."""

from __future__ import annotations

import io
import itertools
from dataclasses import dataclass
from unittest import mock

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import services.csvstats.summarising as summarising
from services.csvstats import (
    INT64_MAX,
    INT64_MIN,
    BadRecord,
    Checkpoint,
    CsvFormatError,
    SumOverflow,
    merge,
    sequential_totals,
    split,
    summarise,
)

PROPERTY_SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
DELIMITERS = (",", ";", "\t", "|", "§")
TERMINATORS = ("\n", "\r\n", "\r")
EXTREMES = (INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1, 2**62, -(2**62), 2**63 // 3)
VALID_SPELLINGS = ("", " ", "  ", "\t", " 7 ", "+5", "-0", "007", "\t-3\t", "  -12")
INVALID_SPELLINGS = (
    "1.5",
    "abc",
    "9223372036854775808",
    "-9223372036854775809",
    "1_000",
    "٣",
    "+",
    "-",
    "1 2",
    "0x1f",
    "1e3",
    "\x0b5",
    "5\x0c",
    "",
    "--1",
    "1-",
)
TEXT_CHARS = ("a", "b", " ", ",", ";", "\t", "|", "§", '"', "\r", "\n", "é", "1", "-", "\x00")


@dataclass(frozen=True)
class CsvCase:
    data: bytes
    delimiter: str


@st.composite
def value_texts(draw) -> str:
    kind = draw(st.integers(0, 19))
    if kind == 0:
        return draw(st.sampled_from(INVALID_SPELLINGS))
    if kind <= 4:
        return str(draw(st.sampled_from(EXTREMES)))
    if kind <= 6:
        return draw(st.sampled_from(VALID_SPELLINGS))
    return str(draw(st.integers(-1000, 1000)))


@st.composite
def encoded_fields(draw, text: str, delimiter: str) -> str:
    if any(c in text for c in (delimiter, '"', "\r", "\n")) or draw(st.integers(0, 5)) == 0:
        return '"' + text.replace('"', '""') + '"'
    return text


@st.composite
def csv_cases(draw, *, malformed: bool = True) -> CsvCase:
    """CSV files with quoting, multiline fields, odd line endings and (optionally) bad rows."""
    delimiter = draw(st.sampled_from(DELIMITERS))
    columns = draw(st.integers(1, 4))
    value_at = draw(st.integers(0, columns - 1))
    names = ["value" if i == value_at else f"c{i}" for i in range(columns)]
    header = delimiter.join(draw(encoded_fields(n, delimiter)) for n in names)
    lines = ["\ufeff" if draw(st.booleans()) else "", header, draw(st.sampled_from(TERMINATORS))]
    texts = st.text(alphabet=st.sampled_from(TEXT_CHARS), max_size=5)
    for _ in range(draw(st.integers(0, 25))):
        shape = draw(st.integers(0, 29))
        if shape == 0:
            record = ""  # an empty line
        else:
            fields = [draw(value_texts()) if i == value_at else draw(texts) for i in range(columns)]
            if malformed and shape == 1:
                fields = fields[: draw(st.integers(0, columns - 1))]  # too few fields
            elif shape == 2:
                fields.append(draw(texts))  # more fields than the header is fine
            record = delimiter.join(draw(encoded_fields(f, delimiter)) for f in fields)
        lines += [record, draw(st.sampled_from(TERMINATORS))]
    if draw(st.booleans()):
        lines.pop()  # the final newline is optional
    if malformed and draw(st.integers(0, 9)) == 0:
        lines.append(delimiter + '"' + draw(texts).replace('"', ""))  # an unterminated quote
    data = "".join(lines).encode("utf-8")
    if malformed and draw(st.integers(0, 19)) == 0:
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b'"', b'x"y'])) + data[at:]
    return CsvCase(data, delimiter)


@st.composite
def quote_heavy_cases(draw, *, malformed: bool = True) -> CsvCase:
    """CSV files shaped like the quote-heavy sample: text fields quoted, some holding the
    delimiter, a line break and doubled quotes; values padded, quoted or empty."""
    delimiter = draw(st.sampled_from(DELIMITERS))
    terminator = draw(st.sampled_from(TERMINATORS))
    lines = [delimiter.join(["id", "name", "value", "comment"]), terminator]
    words = st.text(alphabet=st.sampled_from("ab 1-é"), max_size=4)

    def text_field() -> str:
        kind = draw(st.integers(0, 7))
        word = draw(words)
        if kind == 0:
            line_break = draw(st.sampled_from(TERMINATORS))
            return f'"{word}{delimiter} ""{draw(words)}""{line_break}x"'
        return f'"{word}"' if kind == 1 else word

    for record in range(draw(st.integers(0, 30))):
        value = draw(value_texts()) if malformed else str(draw(st.integers(-1000, 1000)))
        kind = draw(st.integers(0, 9))
        if kind == 0 and '"' not in value:
            value = f'"{value}"'
        elif kind == 1:
            value = f" {value}\t"
        lines += [delimiter.join([str(record), text_field(), value, text_field()]), terminator]
    if draw(st.booleans()):
        lines.pop()
    data = "".join(lines).encode("utf-8")
    if malformed and draw(st.integers(0, 9)) == 0:
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from([b'"', b'x"y', b'""'])) + data[at:]
    return CsvCase(data, delimiter)


def blocks_of(chunk: bytes, sizes: list[int]) -> list[bytes]:
    """Cut chunk into blocks of the given sizes, cycling; a size of 0 adds an empty block."""
    blocks, pos = [], 0
    for size in itertools.cycle(sizes):
        if pos >= len(chunk):
            break
        blocks.append(chunk[pos : pos + size])
        pos += size
    return blocks


def outcome(run) -> tuple:
    """Run a totals computation; return what it decided, comparable across paths."""
    try:
        return ("totals", run())
    except SumOverflow:
        return ("overflow",)
    except BadRecord as exc:
        return ("invalid", exc.record)
    except CsvFormatError as exc:
        return ("format", exc.field)


def summarise_chunk(case: CsvCase, result, plan, sizes: list[int], **options):
    chunk = case.data[plan.byte_start : plan.byte_end]
    return summarise(
        blocks_of(chunk, sizes),
        column_index=result.column_index,
        column="value",
        delimiter=case.delimiter,
        record_start=plan.record_start,
        first_line=plan.first_line,
        **options,
    )


block_sizes = st.lists(st.integers(0, 40), min_size=1, max_size=6).filter(any)
# Tiny batches make every block boundary a place where a batch is cut after a whole record.
batch_bytes = st.sampled_from([summarising._BATCH_BYTES, 1, 3, 16])
# Batches' quotes are checked by splitting at them (0), by a regex walk (huge), or by density.
quote_spacings = st.sampled_from([summarising._QUOTE_SPACING, 0, 10**9])
any_csv_cases = st.one_of(csv_cases(), quote_heavy_cases())


@PROPERTY_SETTINGS
@given(
    case=any_csv_cases,
    chunks=st.integers(1, 64),
    sizes=block_sizes,
    stop_at_first_error=st.booleans(),
    batch=batch_bytes,
    spacing=quote_spacings,
)
def test_chunked_path_decides_like_the_sequential_loop(
    case, chunks, sizes, stop_at_first_error, batch, spacing
):
    expected = outcome(lambda: sequential_totals(case.data, "value", case.delimiter))
    try:
        result = split(case.data, "value", case.delimiter, chunks)
    except CsvFormatError as exc:
        assert expected == ("format", exc.field)
        return
    assert len(result.plans) <= chunks
    summaries = []
    with (
        mock.patch.object(summarising, "_BATCH_BYTES", batch),
        mock.patch.object(summarising, "_QUOTE_SPACING", spacing),
    ):
        for plan in result.plans:
            summaries.append(summarise_chunk(case, result, plan, sizes))
            if stop_at_first_error and summaries[-1].error is not None:
                break
    try:
        actual = ("totals", merge(result.plans, summaries))
    except SumOverflow as exc:
        actual = ("overflow",)
        assert_overflow_happens_in(case, result.plans, exc.chunk_index)
    except BadRecord as exc:
        actual = ("invalid", exc.record)
        plan = result.plans[exc.chunk_index]
        assert plan.record_start < exc.record.record <= plan.record_end
    assert actual == expected


@PROPERTY_SETTINGS
@given(
    case=st.one_of(csv_cases(malformed=False), quote_heavy_cases(malformed=False)),
    chunks=st.integers(1, 64),
)
def test_each_chunk_starts_on_the_physical_line_csv_reader_counts(case, chunks):
    result = split(case.data, "value", case.delimiter, chunks)
    for plan in result.plans:
        before = case.data[: plan.byte_start].decode("utf-8-sig")
        # newline="" splits lines at LF, CRLF and a lone CR, as csv.reader's line_num does.
        lines = io.StringIO(before, newline="").readlines()
        assert plan.first_line == 1 + sum(line.endswith(("\n", "\r")) for line in lines)


def assert_overflow_happens_in(case: CsvCase, plans, index: int) -> None:
    """The sequential loop overflows within chunk `index`: by its end, not by its start."""
    upto = plans[index].byte_end
    assert outcome(lambda: sequential_totals(case.data[:upto], "value", case.delimiter)) == (
        "overflow",
    )
    before = plans[index].byte_start
    assert outcome(lambda: sequential_totals(case.data[:before], "value", case.delimiter)) != (
        "overflow",
    )


class StopHere(Exception):
    pass


@PROPERTY_SETTINGS
@given(
    case=any_csv_cases,
    chunks=st.integers(1, 8),
    every=st.integers(1, 4),
    sizes=block_sizes,
    batch=batch_bytes,
    data=st.data(),
)
def test_resuming_from_a_checkpoint_gives_the_uninterrupted_summary(
    case, chunks, every, sizes, batch, data
):
    try:
        result = split(case.data, "value", case.delimiter, chunks)
    except CsvFormatError:
        assume(False)  # nothing to resume: hypothesis draws another case instead
    with mock.patch.object(summarising, "_BATCH_BYTES", batch):
        check_resume(case, result, every, sizes, data)


def check_resume(case: CsvCase, result, every: int, sizes: list[int], data) -> None:
    plan = data.draw(st.sampled_from(result.plans))
    seen: list[Checkpoint] = []
    whole = summarise_chunk(
        case, result, plan, sizes, checkpoint_every=every, on_checkpoint=seen.append
    )
    assert [c.records_done for c in seen] == list(range(every, whole.records + 1, every))
    if not seen:
        return
    stop = data.draw(st.integers(0, len(seen) - 1))

    def stop_at_checkpoint(checkpoint: Checkpoint) -> None:
        if checkpoint.records_done == seen[stop].records_done:
            raise StopHere

    try:
        summarise_chunk(
            case, result, plan, sizes, checkpoint_every=every, on_checkpoint=stop_at_checkpoint
        )
    except StopHere:
        pass
    else:
        raise AssertionError("on_checkpoint's exception did not propagate")
    saved = Checkpoint.from_dict(seen[stop].to_dict())
    resumed_seen: list[Checkpoint] = []
    resumed = summarise_chunk(
        case,
        result,
        plan,
        data.draw(block_sizes),
        checkpoint_every=every,
        checkpoint=saved,
        on_checkpoint=resumed_seen.append,
    )
    assert resumed == whole
    assert resumed_seen == seen[stop + 1 :]
