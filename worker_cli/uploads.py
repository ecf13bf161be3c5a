"""Request bodies that send a CSV file from disk as they go: a multipart form, or the raw file.

Each has a length, so an upload carries Content-Length rather than chunked encoding, and
neither holds the file in memory.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from typing import BinaryIO
from urllib.parse import quote

UPLOAD_BLOCK_SIZE = 256 * 1024
# A raw CSV body goes out a mebibyte at a time: few sends, and the coordinator reads as much.
RAW_UPLOAD_BLOCK_SIZE = 1024 * 1024


class MultipartUpload:
    """A multipart/form-data body that reads its one file part from disk as it is sent.

    requests' own `files=` reads the whole file into memory first; this body has a length
    (so the upload carries Content-Length) and yields the file block by block.
    """

    def __init__(
        self,
        fields: list[tuple[str, str]],
        file_field: str,
        file: BinaryIO,
        filename: str,
        content_type: str = "text/csv",
        block_size: int = UPLOAD_BLOCK_SIZE,
    ):
        self.boundary = f"chunkwise-{secrets.token_hex(16)}"
        self._file = file
        self._block_size = block_size
        self._head = b"".join(
            self._part_header(name) + value.encode() + b"\r\n" for name, value in fields
        )
        self._head += self._part_header(file_field, filename, content_type)
        self._tail = f"\r\n--{self.boundary}--\r\n".encode()
        self._file_size = _remaining_size(file)

    @property
    def content_type(self) -> str:
        """The Content-Type header naming this body's boundary."""
        return f"multipart/form-data; boundary={self.boundary}"

    def __len__(self) -> int:
        return len(self._head) + self._file_size + len(self._tail)

    def __iter__(self) -> Iterator[bytes]:
        yield self._head
        while block := self._file.read(self._block_size):
            yield block
        yield self._tail

    def _part_header(
        self, name: str, filename: str | None = None, content_type: str | None = None
    ) -> bytes:
        disposition = f'form-data; name="{_quoted(name)}"'
        if filename is not None:
            disposition += f'; filename="{_quoted(filename)}"'
        lines = [f"--{self.boundary}", f"Content-Disposition: {disposition}"]
        if content_type:
            lines.append(f"Content-Type: {content_type}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()


class FileBody:
    """A request body that is an open file, read from disk block by block as it is sent.

    It has a length, so the upload carries Content-Length rather than chunked encoding.
    """

    def __init__(self, file: BinaryIO, block_size: int = RAW_UPLOAD_BLOCK_SIZE):
        self._file = file
        self._block_size = block_size
        self._size = _remaining_size(file)

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[bytes]:
        while block := self._file.read(self._block_size):
            yield block


def _quoted(value: str) -> str:
    # Quotes, backslashes and line breaks would end the header value early.
    return quote(value, safe=" !#$&'()*+,-./:;<=>?@[]^_`{|}~")


def _remaining_size(file: BinaryIO) -> int:
    position = file.tell()
    return os.fstat(file.fileno()).st_size - position
