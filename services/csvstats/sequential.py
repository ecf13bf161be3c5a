"""The reference: one stdlib csv.reader pass with a checked int64 add per value."""

from __future__ import annotations

import contextlib
import csv
import io
import threading
from collections.abc import Iterator

from services.csvstats.errors import BadRecord, SumOverflow
from services.csvstats.model import INT64_MAX, INT64_MIN, InvalidRecord, Totals
from services.csvstats.planning import find_column, scan_file, validate_delimiter
from services.csvstats.syntax import BadValue, excerpt, read_integer, too_few_fields

_field_limit_lock = threading.Lock()


def sequential_totals(data: bytes, column: str, delimiter: str = ",") -> Totals:
    """Compute the totals in one sequential pass, failing exactly as the chunked path does."""
    validate_delimiter(delimiter)
    data = bytes(data)
    find_column(scan_file(data, delimiter).header, column)  # the same checks as split()
    text = data.decode("utf-8-sig")
    total, count, minimum, maximum = 0, 0, None, None
    with _field_limit_at_least(len(text)):
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
        # The column is found again in csv.reader's own reading of the header, so that this
        # pass does not lean on split()'s parser for anything but the submission checks.
        column_index = find_column(tuple(next(reader)), column)
        record, line = 0, reader.line_num + 1
        while True:
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                # strict mode: the only error left after scan_file is a quote open at the end
                reason = "unterminated quote" if "unexpected end" in str(exc) else str(exc)
                raise BadRecord(InvalidRecord(record + 1, line, column, reason, "")) from None
            record += 1
            if row:  # csv.reader yields [] for an empty line: a record with an empty value
                if len(row) <= column_index:
                    raise BadRecord(
                        InvalidRecord(
                            record, line, column, too_few_fields(len(row), column_index), ""
                        )
                    )
                try:
                    value = read_integer(row[column_index])
                except BadValue as exc:
                    raise BadRecord(
                        InvalidRecord(record, line, column, str(exc), excerpt(row[column_index]))
                    ) from None
                if value is not None:
                    total += value
                    if not INT64_MIN <= total <= INT64_MAX:
                        raise SumOverflow(None)
                    count += 1
                    minimum = value if minimum is None else min(minimum, value)
                    maximum = value if maximum is None else max(maximum, value)
            line = reader.line_num + 1
    return Totals(count=count, sum=total, min=minimum, max=maximum)


@contextlib.contextmanager
def _field_limit_at_least(size: int) -> Iterator[None]:
    # csv's field limit (128 KiB) is process-wide; a legal quoted field may be larger, so the
    # limit is raised for this pass only, and the lock keeps two passes from racing on it.
    with _field_limit_lock:
        previous = csv.field_size_limit()
        csv.field_size_limit(max(previous, size + 1))
        try:
            yield
        finally:
            csv.field_size_limit(previous)
