"""Value types of the CSV workload; each crosses HTTP as a plain, validated dict."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def _require_keys(d: object, what: str, required: set[str], optional: frozenset = frozenset()):
    if not isinstance(d, dict):
        raise ValueError(f"{what} must be an object, not {type(d).__name__}")
    missing = required - d.keys()
    if missing:
        raise ValueError(f"{what} lacks {', '.join(sorted(missing))}")
    unknown = d.keys() - required - optional
    if unknown:
        raise ValueError(f"{what} has unknown keys {', '.join(sorted(map(str, unknown)))}")
    return d


def _int(d: dict, key: str, what: str, minimum: int | None = None) -> int:
    value = d[key]
    # bool is an int subclass, but true/false in JSON is a client bug, not a count
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{what}.{key} must be an integer")
    if minimum is not None and value < minimum:
        raise ValueError(f"{what}.{key} must be at least {minimum}")
    return value


def _optional_int64(d: dict, key: str, what: str) -> int | None:
    if d[key] is None:
        return None
    value = _int(d, key, what)
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{what}.{key} is outside int64")
    return value


def _str(d: dict, key: str, what: str) -> str:
    if not isinstance(d[key], str):
        raise ValueError(f"{what}.{key} must be a string")
    return d[key]


@dataclass(frozen=True)
class ChunkPlan:
    """One chunk of a split file: its records, where it starts, and the digest of its bytes."""

    index: int
    record_start: int
    record_end: int
    first_line: int
    byte_start: int
    byte_end: int
    sha256: str

    def to_dict(self) -> dict:
        """Return the plan as a JSON-safe dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ChunkPlan:
        """Rebuild a plan from to_dict() output, raising ValueError if it is malformed."""
        what = "chunk plan"
        _require_keys(d, what, {f for f in cls.__dataclass_fields__})
        plan = cls(
            index=_int(d, "index", what, 0),
            record_start=_int(d, "record_start", what, 0),
            record_end=_int(d, "record_end", what, 0),
            first_line=_int(d, "first_line", what, 1),
            byte_start=_int(d, "byte_start", what, 0),
            byte_end=_int(d, "byte_end", what, 0),
            sha256=_str(d, "sha256", what),
        )
        if plan.record_end < plan.record_start or plan.byte_end < plan.byte_start:
            raise ValueError(f"{what} has a range that ends before it starts")
        if not _SHA256_HEX.fullmatch(plan.sha256):
            raise ValueError(f"{what}.sha256 must be 64 lowercase hex digits")
        return plan


@dataclass(frozen=True)
class SplitResult:
    """The header, the chosen column and the chunk plans of a split file."""

    header: tuple[str, ...]
    column_index: int
    records: int
    plans: tuple[ChunkPlan, ...]


@dataclass(frozen=True)
class InvalidRecord:
    """The first data record of a chunk that the statistics cannot use, and why."""

    record: int
    line: int
    column: str
    reason: str
    excerpt: str

    def message(self) -> str:
        """Return a one-line description naming the record, its line and the column."""
        text = f"record {self.record} (line {self.line}), column {self.column!r}: {self.reason}"
        return f"{text}: {self.excerpt}" if self.excerpt else text

    def to_dict(self) -> dict:
        """Return the record as a JSON-safe dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> InvalidRecord:
        """Rebuild an InvalidRecord from to_dict() output, raising ValueError if malformed."""
        what = "invalid record"
        _require_keys(d, what, {f for f in cls.__dataclass_fields__})
        return cls(
            record=_int(d, "record", what, 1),
            line=_int(d, "line", what, 1),
            column=_str(d, "column", what),
            reason=_str(d, "reason", what),
            excerpt=_str(d, "excerpt", what),
        )


@dataclass(frozen=True)
class Summary:
    """Statistics of one chunk's column, with what an exact, overflow-checked merge needs.

    min_prefix and max_prefix are the extremes of the running sum inside the chunk, relative
    to the chunk's start and including the empty prefix 0. When error is set, every statistic
    covers only the records before the bad one; digest always covers all the chunk's bytes.
    """

    records: int
    count: int
    sum: int
    min: int | None
    max: int | None
    min_prefix: int
    max_prefix: int
    digest: str
    error: InvalidRecord | None = None

    def to_dict(self) -> dict:
        """Return the summary as a JSON-safe dict (sums are exact integers, not floats)."""
        d = asdict(self)
        d["error"] = self.error.to_dict() if self.error else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Summary:
        """Rebuild a summary that arrived over HTTP, raising ValueError if it is malformed."""
        what = "summary"
        required = {f for f in cls.__dataclass_fields__} - {"error"}
        _require_keys(d, what, required, frozenset({"error"}))
        error = d.get("error")
        summary = cls(
            records=_int(d, "records", what, 0),
            count=_int(d, "count", what, 0),
            sum=_int(d, "sum", what),
            min=_optional_int64(d, "min", what),
            max=_optional_int64(d, "max", what),
            min_prefix=_int(d, "min_prefix", what),
            max_prefix=_int(d, "max_prefix", what),
            digest=_str(d, "digest", what),
            error=None if error is None else InvalidRecord.from_dict(error),
        )
        summary._check_consistent()
        return summary

    def _check_consistent(self) -> None:
        if self.count > self.records:
            raise ValueError("summary counts more values than records")
        if (self.min is None) != (self.count == 0) or (self.max is None) != (self.count == 0):
            raise ValueError("summary.min and summary.max must be null exactly when count is 0")
        if self.count and self.min > self.max:
            raise ValueError("summary.min is greater than summary.max")
        if not self.min_prefix <= min(0, self.sum) <= max(0, self.sum) <= self.max_prefix:
            raise ValueError("summary prefixes must bracket both 0 and the sum")
        # Each value lies in [min, max], so the sum and every running sum are bounded by count
        # of them: a sum no column could have would otherwise reach the merge unchecked.
        if self.count and not self.count * self.min <= self.sum <= self.count * self.max:
            raise ValueError("summary.sum must lie between count * min and count * max")
        if self.count and not (
            self.count * min(self.min, 0) <= self.min_prefix
            and self.max_prefix <= self.count * max(self.max, 0)
        ):
            raise ValueError("summary prefixes must lie within count * min and count * max")
        if self.count == 0 and (self.sum, self.min_prefix, self.max_prefix) != (0, 0, 0):
            raise ValueError("a summary without values must have sum and prefixes 0")
        if self.digest and not _SHA256_HEX.fullmatch(self.digest):
            raise ValueError("summary.digest must be 64 lowercase hex digits")


@dataclass(frozen=True)
class Checkpoint:
    """How far a chunk's summary got: resuming from it skips records_done records."""

    records_done: int
    partial: Summary

    def to_dict(self) -> dict:
        """Return the checkpoint as a JSON-safe dict."""
        return {"records_done": self.records_done, "partial": self.partial.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> Checkpoint:
        """Rebuild a checkpoint from to_dict() output, raising ValueError if malformed."""
        what = "checkpoint"
        _require_keys(d, what, {"records_done", "partial"})
        checkpoint = cls(
            records_done=_int(d, "records_done", what, 0), partial=Summary.from_dict(d["partial"])
        )
        checkpoint.check()
        return checkpoint

    def check(self) -> None:
        """Raise ValueError unless the partial summary is one that resuming can continue."""
        if self.partial.records != self.records_done:
            raise ValueError("checkpoint.partial must cover exactly records_done records")
        if self.partial.error is not None:
            raise ValueError("a checkpoint cannot carry an invalid record")


@dataclass(frozen=True)
class Totals:
    """The job's result: count, exact sum, min and max of the column's values."""

    count: int
    sum: int
    min: int | None
    max: int | None

    def to_dict(self) -> dict:
        """Return the totals as a JSON-safe dict."""
        return asdict(self)
