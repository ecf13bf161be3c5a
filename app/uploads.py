"""Stream uploaded files to a spool in CHUNKWISE_TEMP_DIR, their writeback started on the way in.

The spool is not hashed here: services/csvjobs.py takes its digest beside the split, on the core
the split leaves idle (while the body arrives, the client holds that core).
"""

from __future__ import annotations

import contextlib
import io
import os
import queue
import threading
import uuid
from concurrent.futures import Future
from pathlib import Path
from typing import BinaryIO

from flask import Flask, Request, Response, current_app, g, request
from werkzeug.exceptions import BadRequest, RequestEntityTooLarge
from werkzeug.formparser import FormDataParser

from services.archive import (
    TEMP,
    Spooled,
    make_private_directory,
    private_opener,
    storage_failure,
    sync_to_disk,
)
from services.csvstats import vectorized as csvstats_vectors
from services.errors import StorageFull, StorageUnavailable

# The writeback of what a spool was given is started each time this much more was written, by
# a thread of its own: the fsync when the spool finishes then waits only for the last few.
EARLY_SYNC_BYTES = 4 << 20


class _Writeback:
    """A thread that syncs a file's data to disk each time it is asked, while the file grows."""

    def __init__(self, path: Path):
        self._path = path
        self._asked: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self.failure: OSError | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def ask(self) -> None:
        """Start syncing what was written so far (asks made meanwhile are merged)."""
        self._asked.put(True)

    def stop(self) -> None:
        """Wait for the thread to end."""
        self._asked.put(False)
        self._thread.join()

    def _run(self) -> None:
        try:
            fd = os.open(self._path, os.O_RDONLY)
        except OSError:
            fd = None  # the spool's own fsync, when it finishes, meets the same error
        try:
            running = self._asked.get()
            while running:
                while not self._asked.empty():  # one sync serves every ask made meanwhile
                    running = self._asked.get() and running
                if fd is not None and self.failure is None:
                    try:
                        os.fdatasync(fd)
                    except OSError as exc:
                        # This descriptor may be the only one told of a failed writeback: the
                        # spool's finish must not pass it by.
                        self.failure = exc
                running = running and self._asked.get()
        finally:
            if fd is not None:
                os.close(fd)


class Spool(io.RawIOBase):
    """A write-only temp file that counts the bytes it is given and has their writeback
    started as they arrive (so that finishing it is quick)."""

    _file: BinaryIO | None = None  # None until opened: close() runs even if opening failed
    _writeback: _Writeback | None = None  # started once EARLY_SYNC_BYTES were written

    def __init__(self, directory: Path):
        self.path = directory / f"upload-{uuid.uuid4().hex}"
        try:
            make_private_directory(directory)
            # "x": a name already there is never written into.
            self._file = open(self.path, "xb", opener=private_opener)  # noqa: SIM115 - see close()
        except OSError as exc:
            raise storage_failure(exc, TEMP) from exc
        self.size = 0
        self._synced_at = 0  # the size when the writeback was last asked for

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def write(self, data) -> int:
        self.size += len(data)
        try:
            written = self._file.write(data)
        except OSError as exc:
            raise storage_failure(exc, TEMP) from exc
        if self.size - self._synced_at >= EARLY_SYNC_BYTES:
            self._synced_at = self.size
            if self._writeback is None:
                self._writeback = _Writeback(self.path)
            self._writeback.ask()
        return written

    def seek(self, offset: int, whence: int = 0) -> int:
        # werkzeug rewinds a finished file part; nothing reads it back through this object.
        return 0

    def close(self) -> None:
        try:
            if self._writeback is not None:
                self._writeback.stop()
            # A buffered write may meet a full disk only here, when it is flushed.
            if self._file is not None:
                self._file.close()
        except OSError as exc:
            raise storage_failure(exc, TEMP) from exc
        finally:
            super().close()

    def finish(self) -> Spooled:
        """Close the spool, leave the rest of its writeback to a thread, and describe it.

        On disk before any job can refer to them: the job's row commits durably, and a power
        cut after that must not leave it without its input (the archive's rename keeps these
        very blocks). The submission waits for the sync (Spooled.wait_until_on_disk) after the
        split, which needs only the page cache and runs meanwhile, and before the admission's
        transaction: a disk slower than the body's arrival is then waited for once, not twice.
        """
        # Taken from the spool first, so that close() leaves it running for _sync to end.
        writeback, self._writeback = self._writeback, None
        self.close()
        synced: Future[None] = Future()
        threading.Thread(target=_sync, args=(self.path, writeback, synced), daemon=True).start()
        return Spooled(path=self.path, size=self.size, synced=synced)


def _sync(path: Path, writeback: _Writeback | None, synced: Future[None]) -> None:
    """Wait out a spool's writeback, fsync it, and settle `synced` with how that went."""
    try:
        if writeback is not None:
            writeback.stop()
            if writeback.failure is not None:
                raise writeback.failure
        sync_to_disk(path)
    except OSError as exc:
        synced.set_exception(storage_failure(exc, TEMP))
    else:
        synced.set_result(None)


class SpoolingRequest(Request):
    """A request whose file parts go to spools instead of memory or /tmp."""

    def _get_file_stream(
        self, total_content_length, content_type, filename=None, content_length=None
    ):
        spool = Spool(current_app.config["CHUNKWISE_TEMP_DIR"])
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


def spooled_body() -> Spooled:
    """Stream the raw request body to a spool; return what it spooled."""
    spool = Spool(current_app.config["CHUNKWISE_TEMP_DIR"])
    g.setdefault("spools", []).append(spool)
    # Only a block at a time in memory, received into one buffer (gunicorn's Body.readinto is
    # read_body_into, in gunicorn.conf.py): the split reads the spool through a memory map.
    stream, block = request.stream, memoryview(bytearray(BODY_BLOCK_SIZE))
    while received := stream.readinto(block):
        spool.write(block[:received])
    # gunicorn ends the stream where the client hung up: a cut body must not pass for a CSV.
    expected = request.content_length
    if expected is not None and spool.size < expected:
        raise BadRequest(
            f"the body ended after {spool.size} of its Content-Length {expected} bytes"
        )
    return spool.finish()


def uploaded(field: str) -> Spooled | None:
    """The spooled upload of a file field, or None when the form has no such file."""
    storage = request.files.get(field)
    if storage is None or not isinstance(storage.stream, Spool):
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

    @app.after_request
    def remove_spools_once_sent(response: Response) -> Response:
        # Freeing a large file's blocks takes milliseconds the client need not wait for: the
        # server calls this once the whole response is written.
        spools = g.get("spools")
        if spools:
            response.call_on_close(lambda: _remove(spools))
        return response

    @app.teardown_request
    def remove_spools(exc: BaseException | None) -> None:
        # Failed past the hooks (a later one raised, say), the response that was to remove
        # the spools may never be sent: removed now (twice is harmless).
        if exc is not None:
            _remove(g.get("spools", []))


def _remove(spools: list[Spool]) -> None:
    """Close the spools and delete their files (a spool the archive took is gone already)."""
    for spool in spools:
        # The request already answered any storage error; what is left is to tidy up.
        with contextlib.suppress(StorageFull, StorageUnavailable):
            spool.close()
        spool.path.unlink(missing_ok=True)
