"""The CSV workload's pure core: split a file into chunks, summarise each, merge the summaries.

Imports only the standard library (numpy and polars, where installed, on first use), and no I/O
beyond the bytes it is given. Decisions the spec left open: an empty line is a record whose value is
empty; a lone CR outside quotes ends a record, as it does for csv.reader; values may be padded with
spaces and tabs; a quote anywhere but around a whole field (or doubled inside one) makes split
reject the file.
"""

from services.csvstats.errors import BadRecord, CsvFormatError, MergeError, SumOverflow
from services.csvstats.merging import merge, partial_totals
from services.csvstats.model import (
    INT64_MAX,
    INT64_MIN,
    Checkpoint,
    ChunkPlan,
    InvalidRecord,
    SplitResult,
    Summary,
    Totals,
)
from services.csvstats.planning import MAX_CHUNKS, split, validate_delimiter
from services.csvstats.sequential import sequential_totals
from services.csvstats.summarising import summarise

__all__ = [
    "MAX_CHUNKS",
    "INT64_MAX",
    "INT64_MIN",
    "Checkpoint",
    "ChunkPlan",
    "CsvFormatError",
    "BadRecord",
    "InvalidRecord",
    "MergeError",
    "SplitResult",
    "SumOverflow",
    "Summary",
    "Totals",
    "merge",
    "partial_totals",
    "sequential_totals",
    "split",
    "summarise",
    "validate_delimiter",
]
