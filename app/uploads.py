"""Stream uploaded files to a spool in CHUNKWISE_TEMP_DIR, hashing them on the way in."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import queue
import threading
import uuid
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

# The spool's thread hashes the body in batches of about this much (hashlib lets the GIL go for
# each piece), and asks for the bytes written so far to go to disk each time this much more has
# been written, so that the fsync when the spool finishes waits only for the last few.
HASH_BATCH_BYTES = 1 << 20
EARLY_SYNC_BYTES = 4 << 20
# Batches written but not yet hashed: the request's thread waits rather than hold more.
_BATCHES_IN_FLIGHT = 4


class HashingSpool(io.RawIOBase):
    """A write-only temp file that computes its SHA-256 and size as bytes arrive.

    The request's thread writes the file; a thread of the spool's own hashes the bytes and
    starts their writeback meanwhile (both let the GIL go), so neither waits for the other.
    """

    _file: BinaryIO | None = None  # None until opened: close() runs even if opening failed
    _hashing: threading.Thread | None = None  # started by the first write

    def __init__(self, directory: Path):
        self.path = directory / f"upload-{uuid.uuid4().hex}"
        self._sha = hashlib.sha256()
        self.size = 0
        self._batch: list[bytes] = []
        self._batch_bytes = 0
        self._written: queue.Queue[list[bytes] | None] = queue.Queue(_BATCHES_IN_FLIGHT)
        self._sync_failure: OSError | None = None
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
        # The hashing thread reads it later: a buffer the caller may reuse is copied now.
        data = bytes(data)
        try:
            written = self._file.write(data)
        except OSError as exc:
            raise storage_failure(exc, TEMP) from exc
        self.size += len(data)
        self._batch.append(data)
        self._batch_bytes += len(data)
        if self._batch_bytes >= HASH_BATCH_BYTES:
            self._hand_over()
        return written

    def _hand_over(self) -> None:
        """Give the written bytes not yet handed over to the hashing thread."""
        if self._hashing is None:
            self._hashing = threading.Thread(target=self._hash_and_sync, daemon=True)
            self._hashing.start()
        self._written.put(self._batch)
        self._batch, self._batch_bytes = [], 0

    def _hash_and_sync(self) -> None:
        """Hash each batch, and start the writeback of what reached the file each time
        EARLY_SYNC_BYTES more were hashed."""
        fd, unsynced = None, 0
        with contextlib.suppress(OSError):
            fd = os.open(self.path, os.O_RDONLY)
        while (batch := self._written.get()) is not None:
            for piece in batch:
                self._sha.update(piece)
                unsynced += len(piece)
            if fd is not None and unsynced >= EARLY_SYNC_BYTES and self._sync_failure is None:
                unsynced = 0
                try:
                    os.fdatasync(fd)
                except OSError as exc:
                    # This descriptor may be the only one told of a failed writeback: the
                    # spool's finish must not pass it by.
                    self._sync_failure = exc
        if fd is not None:
            os.close(fd)

    def _stop_hashing(self) -> None:
        """Hash what is left and wait for the hashing thread to end."""
        if self._batch:
            self._hand_over()
        if self._hashing is not None:
            self._written.put(None)
            self._hashing.join()
            self._hashing = None

    def seek(self, offset: int, whence: int = 0) -> int:
        # werkzeug rewinds a finished file part; nothing reads it back through this object.
        return 0

    def close(self) -> None:
        try:
            self._stop_hashing()
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
        return Upload(path=self.path, sha256=self._sha.hexdigest(), size=self.size)


class SpoolingRequest(Request):
    """A request whose file parts go to hashing spools instead of memory or /tmp."""

    def _get_file_stream(
        self, total_content_length, content_type, filename=None, content_length=None
    ):
        spool = HashingSpool(current_app.config["CHUNKWISE_TEMP_DIR"])
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


def spooled_body() -> Upload:
    """Stream the raw request body to a hashing spool; return the upload."""
    spool = HashingSpool(current_app.config["CHUNKWISE_TEMP_DIR"])
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
