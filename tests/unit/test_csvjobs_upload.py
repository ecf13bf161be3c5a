"""A spooled CSV is hashed beside its split: the digest is of every byte, the plans are those
split() makes of the same bytes, and a file the split refuses leaves no hashing thread behind."""

import hashlib
import threading
from pathlib import Path

import pytest

from services import archive, csvstats
from services.csvjobs import hash_and_split
from services.errors import StorageUnavailable

CONTENT = b"id,value\n" + b"".join(b'%d,"%d"\n' % (i, i * 7 - 500) for i in range(20_000))


def spooled(tmp_path, content: bytes) -> archive.Spooled:
    path = tmp_path / "upload-1"
    path.write_bytes(content)
    return archive.Spooled(path, len(content))


def test_the_upload_carries_the_digest_of_every_byte_and_the_split_of_the_same_bytes(tmp_path):
    upload, split = hash_and_split(spooled(tmp_path, CONTENT), "value", ",", 4)

    assert upload == archive.Upload(
        tmp_path / "upload-1", hashlib.sha256(CONTENT).hexdigest(), len(CONTENT)
    )
    assert split == csvstats.split(CONTENT, "value", ",", 4)


def test_a_file_the_split_refuses_is_refused_once_the_hashing_thread_has_ended(tmp_path):
    threads = threading.active_count()

    with pytest.raises(csvstats.CsvFormatError) as caught:
        hash_and_split(spooled(tmp_path, CONTENT), "no such column", ",", 4)

    assert caught.value.field == "column"
    assert threading.active_count() == threads


def test_a_spool_that_cannot_be_read_back_is_storage_unavailable_naming_the_temp_directory(
    tmp_path,
):
    with pytest.raises(StorageUnavailable) as caught:
        hash_and_split(archive.Spooled(tmp_path, 10), "value", ",", 1)  # a directory

    assert caught.value.details["directory"] == "temp"


def test_a_file_the_split_refuses_stops_the_hashing_at_its_next_block(tmp_path, monkeypatch):
    reads = []
    hashing = archive.spool_sha256

    def counted(spooled: archive.Spooled, cancelled: threading.Event) -> str | None:
        digest = hashing(spooled, cancelled)
        reads.append(digest)
        return digest

    def refused(*args) -> None:
        raise csvstats.CsvFormatError("column", "no such column")

    big = spooled(tmp_path, CONTENT * 200)  # about 50 blocks to hash
    monkeypatch.setattr(archive, "spool_sha256", counted)
    monkeypatch.setattr("services.csvjobs.split_spool", refused)

    with pytest.raises(csvstats.CsvFormatError):
        hash_and_split(big, "value", ",", 4)

    assert reads == [None]


def test_a_cancelled_digest_reads_no_further():
    cancelled = threading.Event()
    cancelled.set()
    assert archive.spool_sha256(archive.Spooled(Path(__file__), 1), cancelled) is None
