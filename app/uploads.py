"""Stream uploaded files to a spool in CHUNKWISE_TEMP_DIR, hashing them on the way in."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import queue
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from flask import Flask, Request, current_app, g, request
from werkzeug.exceptions import BadRequest, RequestEntityTooLarge
from werkzeug.formparser import FormDataParser

from services.archive import (
    TEMP,
    Upload,
    make_private_directory,
    private_opener,
    storage_failure,
    sync_to_disk,
)
from services.csvstats import vectorized as csvstats_vectors
from services.errors import StorageFull, StorageUnavailable

# A spool's threads take its bytes in batches of this much (hashlib and numpy let the GIL go for
# each); the writeback of what was written is started each time this much more was hashed, so
# that the fsync when the spool finishes waits only for the last few.
BATCH_BYTES = 1 << 18
EARLY_SYNC_BYTES = 4 << 20
# Batches are copies in buffers a spool reuses, at most this many: the request's thread waits
# for one to come back rather than hold more. Whole 1 MiB blocks of the body handed to the
# threads peaked a 49 MiB text/csv upload at up to idle + 33.4 MiB (bench.upload_memory), over
# the +32 MiB bound; four reused 256 KiB buffers at +23.7-28.1 MiB.
_BUFFERS = 4


class _Follower:
    """A thread that takes each batch of a spool's bytes, in order, after it is written."""

    def __init__(self, take: Callable[[memoryview], None], done: Callable[[bytearray], None]):
        self._take = take
        self._done = done
        self._batches: queue.SimpleQueue[tuple[bytearray, int] | None] = queue.SimpleQueue()
        self.failure: Exception | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def put(self, buffer: bytearray, length: int) -> None:
        """Hand over the batch in the first `length` bytes of buffer."""
        self._batches.put((buffer, length))

    def stop(self) -> None:
        """Wait until every batch handed over is taken; raise what taking one raised."""
        self._batches.put(None)
        self._thread.join()
        if self.failure is not None:
            raise self.failure

    def _run(self) -> None:
        while (batch := self._batches.get()) is not None:
            buffer, length = batch
            try:
                if self.failure is None:  # after a failure, batches are only let go of
                    with memoryview(buffer) as view:
                        self._take(view[:length])
            except Exception as exc:  # noqa: BLE001 - raised again by stop()
                self.failure = exc
            finally:
                self._done(buffer)


class HashingSpool(io.RawIOBase):
    """A write-only temp file that computes its SHA-256 and size as bytes arrive.

    The request's thread writes the file; a thread of the spool's own hashes the bytes and
    starts their writeback, and given a delimiter another scans them for the CSV split
    (services.csvstats.vectorized.StreamedLayout), all meanwhile.
    """

    _file: BinaryIO | None = None  # None until opened: close() runs even if opening failed

    def __init__(self, directory: Path, delimiter: str | None = None):
        self.path = directory / f"upload-{uuid.uuid4().hex}"
        self._sha = hashlib.sha256()
        self.size = 0
        self._followers: list[_Follower] = []  # started by the first batch
        self._buffer: bytearray | None = None  # the batch being filled
        self._filled = 0
        self._buffers_made = 0
        self._free: queue.SimpleQueue[bytearray] = queue.SimpleQueue()
        self._takers_left: dict[int, int] = {}  # by id() of each buffer handed over
        self._lock = threading.Lock()
        self._sync_fd: int | None = None
        self._unsynced = 0
        self._sync_failure: OSError | None = None
        self.layout = csvstats_vectors.streamed_layout(delimiter) if delimiter else None
        try:
            make_private_directory(directory)
            # "x": a name already there is never written into.
            self._file = open(self.path, "xb", opener=private_opener)  # noqa: SIM115 - see close()
        except OSError as exc:
            raise storage_failure(exc, TEMP) from exc

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def write(self, data) -> int:
        try:
            written = self._file.write(data)
        except OSError as exc:
            raise storage_failure(exc, TEMP) from exc
        with memoryview(data) as view, view.cast("B") as piece:
            self.size += len(piece)
            at = 0
            while at < len(piece):
                if self._buffer is None:
                    self._buffer = self._free_buffer()
                room = min(BATCH_BYTES - self._filled, len(piece) - at)
                self._buffer[self._filled : self._filled + room] = piece[at : at + room]
                self._filled += room
                at += room
                if self._filled == BATCH_BYTES:
                    self._hand_over()
        return written

    def _free_buffer(self) -> bytearray:
        """A buffer no follower holds: a new one while fewer than _BUFFERS were made."""
        if self._buffers_made < _BUFFERS and self._free.empty():
            self._buffers_made += 1
            return bytearray(BATCH_BYTES)
        return self._free.get()

    def _hand_over(self) -> None:
        """Give the batch filled so far to the followers."""
        if not self._followers:
            self._followers.append(_Follower(self._hash_and_sync, self._taken))
            if self.layout is not None:
                self._followers.append(_Follower(self._scan, self._taken))
        with self._lock:
            self._takers_left[id(self._buffer)] = len(self._followers)
        for follower in self._followers:
            follower.put(self._buffer, self._filled)
        self._buffer, self._filled = None, 0

    def _taken(self, buffer: bytearray) -> None:
        """A follower is done with buffer: the last one frees it for the next batch."""
        with self._lock:
            self._takers_left[id(buffer)] -= 1
            if self._takers_left[id(buffer)]:
                return
            del self._takers_left[id(buffer)]
        self._free.put(buffer)

    def _hash_and_sync(self, batch: memoryview) -> None:
        """Hash a batch, and start the writeback of what reached the file each time
        EARLY_SYNC_BYTES more were hashed."""
        self._sha.update(batch)
        self._unsynced += len(batch)
        if self._unsynced < EARLY_SYNC_BYTES or self._sync_failure is not None:
            return
        self._unsynced = 0
        try:
            if self._sync_fd is None:
                self._sync_fd = os.open(self.path, os.O_RDONLY)
            os.fdatasync(self._sync_fd)
        except OSError as exc:
            # This descriptor may be the only one told of a failed writeback: the spool's
            # finish must not pass it by.
            self._sync_failure = exc

    def _scan(self, batch: memoryview) -> None:
        self.layout.feed(batch)

    def _stop_followers(self) -> None:
        """Give the followers what is left and wait for them to take it."""
        if self._filled:
            self._hand_over()
        self._buffer = None
        followers, self._followers = self._followers, []
        try:
            for follower in followers:
                follower.stop()
        finally:
            if self._sync_fd is not None:
                os.close(self._sync_fd)
                self._sync_fd = None

    def seek(self, offset: int, whence: int = 0) -> int:
        # werkzeug rewinds a finished file part; nothing reads it back through this object.
        return 0

    def close(self) -> None:
        try:
            try:
                self._stop_followers()
            finally:
                # A buffered write may meet a full disk only here, when it is flushed.
                if self._file is not None:
                    self._file.close()
        except OSError as exc:
            raise storage_failure(exc, TEMP) from exc
        finally:
            super().close()

    def finish(self) -> Upload:
        """Close the spool with its bytes on disk, and describe what it holds.

        On disk before any job can refer to them: the job's row commits durably, and a power
        cut after that must not leave it without its input (the archive's rename keeps these
        very blocks). Synced here, before the admission, not inside its transaction.
        """
        self.close()
        try:
            if self._sync_failure is not None:
                raise self._sync_failure
            sync_to_disk(self.path)
        except OSError as exc:
            raise storage_failure(exc, TEMP) from exc
        if self.layout is not None:
            self.layout.end()
        return Upload(
            path=self.path, sha256=self._sha.hexdigest(), size=self.size, layout=self.layout
        )


class SpoolingRequest(Request):
    """A request whose file parts go to hashing spools instead of memory or /tmp."""

    def _get_file_stream(
        self, total_content_length, content_type, filename=None, content_length=None
    ):
        # Scanned for a comma as it arrives: the form's delimiter is not known yet (werkzeug
        # gives the fields only once the whole form is read). A job with another delimiter
        # has its spool scanned after it is received instead.
        spool = HashingSpool(current_app.config["CHUNKWISE_TEMP_DIR"], delimiter=",")
        g.setdefault("spools", []).append(spool)
        return spool

    def make_form_data_parser(self) -> FormDataParser:
        # werkzeug's parser turns a malformed form (cut short, no boundary) into an empty one
        # by default, which the schema then reports as missing fields.
        parser = super().make_form_data_parser()
        parser.silent = False
        return parser

    def _load_form_data(self) -> None:
        # werkzeug refuses an oversized form without saying which of its limits it is over.
        try:
            super()._load_form_data()
        except ValueError as exc:
            raise BadRequest(f"the form is cut short or malformed: {exc}") from exc
        except RequestEntityTooLarge as exc:
            limit = self.max_content_length
            said = f"a request may be at most {limit} bytes"
            if limit is None or self.content_length is None or self.content_length <= limit:
                said = (
                    f"a form may be at most {limit} bytes, with at most {self.max_form_parts} "
                    f"parts, each field but the file at most {self.max_form_memory_size} bytes"
                )
            raise RequestEntityTooLarge(said) from exc


# A raw body is read a mebibyte at a time: gunicorn then receives it in as few recv() calls.
BODY_BLOCK_SIZE = 1024 * 1024


def spooled_body(delimiter: str | None = None) -> Upload:
    """Stream the raw request body to a hashing spool (scanning it for a CSV with that
    delimiter as it arrives, if one is given); return the upload."""
    spool = HashingSpool(current_app.config["CHUNKWISE_TEMP_DIR"], delimiter)
    g.setdefault("spools", []).append(spool)
    # Only a block at a time in memory: the split reads the spool through a memory map.
    stream = request.stream
    while block := stream.read(BODY_BLOCK_SIZE):
        spool.write(block)
    # gunicorn ends the stream where the client hung up: a cut body must not pass for a CSV.
    expected = request.content_length
    if expected is not None and spool.size < expected:
        raise BadRequest(
            f"the body ended after {spool.size} of its Content-Length {expected} bytes"
        )
    return spool.finish()


def uploaded(field: str) -> Upload | None:
    """The spooled upload of a file field, or None when the form has no such file."""
    storage = request.files.get(field)
    if storage is None or not isinstance(storage.stream, HashingSpool):
        return None
    return storage.stream.finish()


def init_app(app: Flask, temp_dir: Path, max_upload_bytes: int) -> None:
    """Install the spooling request class and remove spools no service took over."""
    app.request_class = SpoolingRequest
    # numpy, where the fast extra installed it, loaded now rather than by the first upload's
    # split: a coordinator's memory does not jump by its ~17 MiB mid-request, and that upload
    # does not wait for the import.
    csvstats_vectors.preload()
    app.config["CHUNKWISE_TEMP_DIR"] = temp_dir
    # Room for the other form fields; the file itself is checked against the exact limit.
    app.config["MAX_CONTENT_LENGTH"] = max_upload_bytes + 1024 * 1024

    @app.teardown_request
    def remove_spools(exc: BaseException | None) -> None:
        for spool in g.pop("spools", []):
            # The request already answered any storage error; what is left is to tidy up.
            with contextlib.suppress(StorageFull, StorageUnavailable):
                spool.close()
            spool.path.unlink(missing_ok=True)
