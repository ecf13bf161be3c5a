"""Exceptions of the CSV workload: a bad submission, a bad merge, and the two job failures."""

from __future__ import annotations

from services.csvstats.model import InvalidRecord


class CsvFormatError(ValueError):
    """A submission that cannot be split; field is "file", "column", "delimiter" or "chunks"."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class MergeError(ValueError):
    """The summaries do not match the plans: missing, extra, out of order or for other bytes."""

    def __init__(self, message: str, chunk_index: int | None):
        super().__init__(message)
        self.chunk_index = chunk_index


class SumOverflow(Exception):
    """Adding the values in file order overflows int64; chunk_index is where (None if unchunked)."""

    def __init__(self, chunk_index: int | None = None):
        where = "" if chunk_index is None else f" in chunk {chunk_index}"
        super().__init__(f"the int64 sum of the column overflows{where}")
        self.chunk_index = chunk_index


class BadRecord(Exception):
    """The first record, in file order, whose column value cannot be used."""

    def __init__(self, record: InvalidRecord, chunk_index: int | None = None):
        super().__init__(record.message())
        self.record = record
        self.chunk_index = chunk_index
