"""Summarise one chunk's column from a stream of byte blocks, with checkpoints to resume from.

Each batch (about 32 KiB of whole records) first tries a fast path of whole-buffer byte
operations: separators inside quoted fields are masked, the column is cut out with
bytes.split and converted with int() in bulk. Anything it declines, and every error, goes to a
careful record-by-record reader, which is the one that decides; the property tests hold the
two to the same answers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from itertools import accumulate, repeat
from operator import itemgetter

from services.csvstats.model import INT64_MAX, INT64_MIN, Checkpoint, InvalidRecord, Summary
from services.csvstats.planning import validate_delimiter
from services.csvstats.syntax import (
    BLANKS,
    QUOTE,
    BadValue,
    excerpt,
    first_misplaced_quote,
    iter_records,
    last_record_end,
    line_breaks,
    mask_quoted,
    quoted_field_walk,
    quotes_well_placed,
    read_integer,
    record_fields,
    too_few_fields,
    walk_to_special_fields,
)

_BATCH_BYTES = 32 << 10  # small enough that a batch's objects stay in cache
_DIGITS_SIGNS_NEWLINE = b"0123456789+-\n"
# Bytes per quote above which a batch's quotes are checked by splitting it at them, and below
# which by a regular expression walk: the walk was 15% faster on the quote-heavy sample (a
# quote every 28 bytes), splitting 3% faster on the plain one (a quote every 132 bytes).
_QUOTE_SPACING = 40
_BLANK_BYTES = BLANKS.encode()
_BLANKS_QUOTE = _BLANK_BYTES + QUOTE
# Whitespace becomes a space and anything else "d", so that " d" starts every word but the first.
_WORDS = bytes.maketrans(
    bytes(range(256)), bytes(0x20 if c in b" \t\n" else 0x64 for c in range(256))
)


def _present_values(values: list[bytes]) -> list[bytes] | None:
    """The values that are not empty or blank, without the blanks and quotes around them; or
    None if a value may not be an integer as the spec spells one (the careful path decides).

    The batch's quotes are known to be well placed, so a value that opens with a quote is a
    whole quoted field.
    """
    joined = b"\n".join(values)
    odd = joined.translate(None, _DIGITS_SIGNS_NEWLINE)
    if not odd:
        return joined.split()  # drops the empty values
    # Anything but digits, signs, blanks and quotes (an underscore, a vertical tab, a masked
    # separator) is for the careful path, though int() may accept some of it.
    if odd.translate(None, _BLANKS_QUOTE):
        return None
    if QUOTE in odd:
        if odd.count(QUOTE) != 2 * (joined.count(b'\n"') + joined.startswith(QUOTE)):
            return None  # a doubled quote inside a value
        joined = joined.replace(QUOTE, b"")
    present = joined.translate(None, _BLANK_BYTES).split()
    # One word per value that is not blank, unless a blank stands inside a value ("1 2").
    words = joined.translate(_WORDS)
    if words.count(b" d") + words.startswith(b"d") != len(present):
        return None
    return present


def summarise(
    blocks: Iterable[bytes],
    *,
    column_index: int,
    column: str,
    delimiter: str = ",",
    record_start: int = 0,
    first_line: int = 2,
    checkpoint: Checkpoint | None = None,
    on_checkpoint: Callable[[Checkpoint], None] | None = None,
    checkpoint_every: int = 50_000,
) -> Summary:
    """Summarise the column of one chunk's records, given as byte blocks of any sizes."""
    validate_delimiter(delimiter)
    if not isinstance(column_index, int) or column_index < 0:
        raise ValueError("column_index must be a non-negative integer")
    if not isinstance(checkpoint_every, int) or checkpoint_every < 1:
        raise ValueError("checkpoint_every must be a positive integer")
    if checkpoint is not None:
        checkpoint.check()
    chunk = _ChunkSummariser(
        column_index,
        column,
        delimiter,
        record_start,
        first_line,
        checkpoint,
        on_checkpoint,
        checkpoint_every,
    )
    hasher = hashlib.sha256()
    pending = bytearray()
    threshold = _BATCH_BYTES
    for block in blocks:
        hasher.update(block)
        if chunk.error is not None:
            continue  # the digest still covers every byte
        view = memoryview(block)
        for offset in range(0, len(view), _BATCH_BYTES):
            pending += view[offset : offset + _BATCH_BYTES]
            if len(pending) < threshold:
                continue
            cut = last_record_end(pending)
            if cut == 0:
                threshold = 2 * len(pending)  # one record is longer than a batch
                continue
            chunk.read(bytes(pending[:cut]))
            del pending[:cut]
            threshold = _BATCH_BYTES
            if chunk.error is not None:
                break
    if chunk.error is None:
        chunk.read(bytes(pending))
        chunk.finish()
    return chunk.summary(hasher.hexdigest())


class _ChunkSummariser:
    """Running statistics of a chunk, fed batches of whole records in order."""

    def __init__(
        self,
        column_index: int,
        column: str,
        delimiter: str,
        record_start: int,
        first_line: int,
        checkpoint: Checkpoint | None,
        on_checkpoint: Callable[[Checkpoint], None] | None,
        every: int,
    ):
        self.column_index = column_index
        self.column = column
        self.delimiter = delimiter
        self.record_start = record_start
        self.on_checkpoint = on_checkpoint
        self.every = every
        self.records = 0  # records read so far, skipped ones included
        self.line = first_line  # the physical line on which the next record starts
        self.error: InvalidRecord | None = None
        self.skip = checkpoint.records_done if checkpoint else 0
        partial = checkpoint.partial if checkpoint else None
        self.count = partial.count if partial else 0
        self.total = partial.sum if partial else 0
        self.minimum = partial.min if partial else None
        self.maximum = partial.max if partial else None
        self.low = partial.min_prefix if partial else 0
        self.high = partial.max_prefix if partial else 0
        # The fast path splits bytes on a one-byte delimiter: a non-ASCII one is swapped for
        # the unit separator, in batches that do not already hold it.
        self.encoded_delimiter = b"" if delimiter.isascii() else delimiter.encode()
        byte = b"\x1f" if self.encoded_delimiter else delimiter.encode()
        mask = b"\x01" if byte == b"\x00" else b"\x00"
        self.delimiter_byte = byte
        self.separators = (byte, b"\r", b"\n")
        self.not_separator = bytes(sorted(set(range(256)) - {byte[0], 0x0D, 0x0A}))
        self.quote_walk = quoted_field_walk(byte, byte + b"\r\n")
        self.hide_in_quotes = bytes.maketrans(byte + b"\r\n", mask * 3)
        self.not_structure = bytes(sorted(set(range(256)) - {byte[0], 0x0A}))

    def read(self, batch: bytes) -> None:
        """Add a batch of whole records (the last batch may end in an unfinished one)."""
        fast = self._fast_values(batch) if batch else None
        if fast is None:
            if batch:
                self._read_carefully(batch, self.records)
            return
        values, lines = fast
        at_start = self.records
        i = min(len(values), max(0, self.skip - self.records))
        self.records += i
        while i < len(values):
            j = min(len(values), i + self.every - self.records % self.every)
            if not self._add_values(values[i:j]):
                self.records = at_start
                self._read_carefully(batch, at_start + i)
                return
            self.records += j - i
            i = j
            if self.records % self.every == 0:
                self._checkpoint()
        self.line += lines

    def finish(self) -> None:
        """Raise ValueError if a resumed checkpoint claimed more records than the chunk has."""
        if self.records < self.skip:
            raise ValueError(
                f"the checkpoint is at record {self.skip} of a chunk of {self.records} records"
            )

    def summary(self, digest: str) -> Summary:
        """Return the statistics so far as a Summary over the given digest."""
        return Summary(
            records=self.records,
            count=self.count,
            sum=self.total,
            min=self.minimum,
            max=self.maximum,
            min_prefix=self.low,
            max_prefix=self.high,
            digest=digest,
            error=self.error,
        )

    def _checkpoint(self) -> None:
        if self.on_checkpoint is not None:
            self.on_checkpoint(Checkpoint(self.records, self.summary("")))

    def _fast_values(self, batch: bytes) -> tuple[list[bytes], int] | None:
        """Return each record's column bytes and the batch's line breaks, or None if the
        careful path must read this batch."""
        if not batch.isascii():
            try:
                str(batch, "utf-8")
            except UnicodeDecodeError:
                return None
        if self.encoded_delimiter:
            if self.delimiter_byte in batch:
                return None
            batch = batch.replace(self.encoded_delimiter, self.delimiter_byte)
        breaks_in_quotes = 0
        quotes = batch.count(QUOTE)
        if quotes and quotes * _QUOTE_SPACING < len(batch):
            # Few quotes: splitting the batch at them costs less than walking it.
            pieces = batch.split(QUOTE)
            if quotes % 2 or not quotes_well_placed(pieces, self.separators):
                return None
            quoted = QUOTE.join(pieces[1::2])
            breaks_in_quotes = line_breaks(quoted)
            if quoted.translate(None, self.not_separator):
                batch = mask_quoted(pieces, self.hide_in_quotes)
        elif quotes:
            spans = walk_to_special_fields(self.quote_walk, batch)
            if spans is None or (spans and spans[-1] == len(batch)):
                return None  # a misplaced quote, or one left open: the careful path decides
            if spans:
                batch, breaks_in_quotes = self._mask_fields(batch, spans)
        if b"\r" in batch:
            batch = batch.replace(b"\r\n", b"\n")
            if b"\r" in batch:
                batch = batch.replace(b"\r", b"\n")
        terminated = batch.endswith(b"\n")
        if terminated:
            batch = batch[:-1]
        lines = batch.count(b"\n") + terminated + breaks_in_quotes
        if self.column_index:
            batch = self._pad_empty_records(batch)
        values = self._uniform_column(batch)
        if values is None:
            values = self._ragged_column(batch)
        if values is None:
            return None
        return values, lines

    def _mask_fields(self, batch: bytes, spans: list[int]) -> tuple[bytes, int]:
        """The batch with separators hidden inside the quoted fields whose contents span
        [start, end, ...] covers, and the line breaks those fields hold."""
        # Only the fields that hold a separator are translated; the bytes between them are
        # copied as they are.
        starts, ends = spans[::2], spans[1::2]
        inside = list(map(batch.__getitem__, map(slice, starts, ends)))
        pieces = [b""] * (2 * len(inside) + 1)
        pieces[::2] = map(batch.__getitem__, map(slice, [0, *ends], [*starts, len(batch)]))
        pieces[1::2] = map(bytes.translate, inside, repeat(self.hide_in_quotes))
        return b"".join(pieces), line_breaks(QUOTE.join(inside))

    def _pad_empty_records(self, batch: bytes) -> bytes:
        """Give each empty record (an empty line) empty fields up to the column."""
        # Done before blanks are stripped: a line of blanks is a record with too few fields.
        pad = self.delimiter_byte * self.column_index
        while b"\n\n" in batch:
            batch = batch.replace(b"\n\n", b"\n" + pad + b"\n")
        if not batch or batch.startswith(b"\n"):
            batch = pad + batch
        if batch.endswith(b"\n"):
            batch += pad
        return batch

    def _uniform_column(self, batch: bytes) -> list[bytes] | None:
        """The column of LF-separated records that all have the same number of fields."""
        skeleton = batch.translate(None, self.not_structure)
        width = skeleton.find(b"\n")
        width = len(skeleton) if width < 0 else width
        row = self.delimiter_byte * width
        if width < self.column_index or skeleton != (row + b"\n") * skeleton.count(b"\n") + row:
            return None
        if width == 0:
            return batch.split(b"\n")
        # Not replacing LF saves an object per record: a record's last field and the next
        # one's first come out joined, which only the first and last columns need to undo.
        parts = batch.split(self.delimiter_byte)
        if 0 < self.column_index < width:
            return parts[self.column_index :: width]
        edges = b"\n".join(parts[::width]).split(b"\n")
        return edges[0::2] if self.column_index == 0 else edges[1::2]

    def _ragged_column(self, batch: bytes) -> list[bytes] | None:
        """The column of LF-separated records with varying numbers of fields, or None if one
        ends before it."""
        d, index = self.delimiter_byte, self.column_index
        if index == 0:
            return list(map(itemgetter(0), map(bytes.partition, batch.split(b"\n"), repeat(d))))
        fields = map(bytes.split, batch.split(b"\n"), repeat(d), repeat(index + 1))
        try:
            return list(map(itemgetter(index), fields))
        except IndexError:
            return None

    def _add_values(self, values: list[bytes]) -> bool:
        """Add a run of records' values; False (adding nothing) if any needs a closer look."""
        present = _present_values(values)
        if present is None:
            return False
        try:
            return self._add_numbers(list(map(int, present)))  # only signs and digits left
        except ValueError:
            return False

    def _add_numbers(self, numbers: list[int]) -> bool:
        if not numbers:
            return True
        low, high = min(numbers), max(numbers)
        if low < INT64_MIN or high > INT64_MAX:
            return False
        prefixes = list(accumulate(numbers, initial=self.total))
        self.low = min(self.low, min(prefixes))
        self.high = max(self.high, max(prefixes))
        self.total = prefixes[-1]
        self.count += len(numbers)
        self.minimum = low if self.minimum is None else min(self.minimum, low)
        self.maximum = high if self.maximum is None else max(self.maximum, high)
        return True

    def _read_carefully(self, batch: bytes, done: int) -> None:
        """Read batch record by record, skipping those before `done` (already counted)."""
        index, line = self.records, self.line
        skip_below = max(done, self.skip)
        for start, content_end, end in iter_records(batch):
            if index >= skip_below:
                problem = self._read_record(batch[start:content_end])
                if problem is not None:
                    reason, shown = problem
                    self.error = InvalidRecord(
                        record=self.record_start + index + 1,
                        line=line,
                        column=self.column,
                        reason=reason,
                        excerpt=shown,
                    )
                    self.records, self.line = index, line
                    return
                self.records = index + 1
                if self.records % self.every == 0:
                    self._checkpoint()
            index += 1
            line += line_breaks(batch, start, end)
        self.records, self.line = index, line

    def _read_record(self, raw: bytes) -> tuple[str, str] | None:
        """Add one record's value; return (reason, excerpt) if the record is invalid."""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return "invalid UTF-8", excerpt(raw[exc.start : exc.end])
        if '"' in text:
            pieces = text.split('"')
            if first_misplaced_quote(pieces, (self.delimiter,)) is not None:
                return "misplaced quote", excerpt(text)
            if len(pieces) % 2 == 0:
                return "unterminated quote", ""
        if not text:
            return None  # an empty line is a record whose value is empty
        fields = record_fields(text, self.delimiter)
        if len(fields) <= self.column_index:
            return too_few_fields(len(fields), self.column_index), ""
        try:
            value = read_integer(fields[self.column_index])
        except BadValue as exc:
            return str(exc), excerpt(fields[self.column_index])
        if value is not None:
            self._add_value(value)
        return None

    def _add_value(self, value: int) -> None:
        self.count += 1
        self.total += value
        self.low = min(self.low, self.total)
        self.high = max(self.high, self.total)
        self.minimum = value if self.minimum is None else min(self.minimum, value)
        self.maximum = value if self.maximum is None else max(self.maximum, value)
