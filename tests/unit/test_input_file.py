"""A task's input served as a file: the kernel's sendfile sends exactly the range, and when it
stops short, closing the file fails the attempt for a bad archive, never for a reader gone.

gunicorn sends a file wrapper's range with socket.sendfile, which seeks the file to where the
send ended, then puts the descriptor back where it was; these tests do the same over a pair of
connected sockets, with the attempt's failure recorded instead of written to a database.
"""

import errno
import os
import socket
import threading

import pytest

from services import tasks

DATA = bytes(range(256)) * 4096  # 1 MiB
ORIGIN, LENGTH = 1000, 600_000


@pytest.fixture
def failures(monkeypatch):
    """The attempts failed as input_unavailable: (byte reached, error)."""
    failed = []
    monkeypatch.setattr(
        tasks, "_input_unreadable", lambda rt, task_id, call, sent, exc: failed.append((sent, exc))
    )
    return failed


@pytest.fixture
def archived(tmp_path):
    path = tmp_path / "input"
    path.write_bytes(DATA)
    return path


def served(path, first: int = 5) -> tasks.InputFile:
    """The range as serve_input opens it: a file at ORIGIN, standing for input byte `first`."""
    reader = path.open("rb")
    reader.seek(ORIGIN)
    return tasks.InputFile(
        None, reader, ("task", "lease"), origin=ORIGIN, first=first, length=LENGTH
    )


def send_as_gunicorn_does(file: tasks.InputFile, received: bytearray | None) -> None:
    """socket.sendfile of the range to a reader (None: the reader hung up before it began)."""
    ours, theirs = socket.socketpair()
    reading = None
    if received is None:
        theirs.close()
    else:
        reading = threading.Thread(target=lambda: _drain(theirs, received))
        reading.start()
    fd = file.fileno()
    offset = os.lseek(fd, 0, os.SEEK_CUR)
    try:
        ours.settimeout(5)
        ours.sendfile(file, offset=offset, count=LENGTH)
    finally:
        os.lseek(fd, offset, os.SEEK_SET)
        ours.close()
        if reading is not None:
            reading.join()
        file.close()


def _drain(sock: socket.socket, into: bytearray) -> None:
    while block := sock.recv(1 << 16):
        into += block
    sock.close()


def test_the_kernel_sends_exactly_the_range_and_the_attempt_stands(archived, failures):
    received = bytearray()

    send_as_gunicorn_does(served(archived), received)

    assert bytes(received) == DATA[ORIGIN : ORIGIN + LENGTH]
    assert failures == []


def test_an_archive_cut_short_under_the_send_fails_the_attempt_at_the_byte_reached(
    archived, failures
):
    file = served(archived, first=5)
    os.truncate(archived, ORIGIN + 1234)
    received = bytearray()

    send_as_gunicorn_does(file, received)

    assert len(received) == 1234
    [(sent, exc)] = failures
    assert sent == 5 + 1234
    assert isinstance(exc, EOFError)


def test_a_reader_gone_before_the_send_leaves_the_attempt_alone(archived, failures):
    with pytest.raises(OSError) as caught:
        send_as_gunicorn_does(served(archived), None)

    assert caught.value.errno in (errno.EPIPE, errno.ECONNRESET)
    assert failures == []


def test_a_read_error_where_the_send_stopped_fails_the_attempt_with_its_errno(
    archived, failures, monkeypatch
):
    file = served(archived, first=0)
    file.seek(ORIGIN + 4096)  # where socket.sendfile says the kernel got to

    def failing_read(fd, size, offset):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(tasks.os, "pread", failing_read)
    file.close()

    [(sent, exc)] = failures
    assert (sent, exc.errno) == (4096, errno.EIO)


def test_a_file_closed_twice_is_probed_once(archived, failures):
    file = served(archived)
    file.seek(ORIGIN + 10)  # a send stopped short by a reader that went away

    file.close()
    file.close()

    assert failures == []


def test_read_serves_the_range_in_blocks_and_then_nothing(archived, failures):
    file = served(archived)

    blocks = iter(lambda: file.read(100_000), b"")

    assert b"".join(blocks) == DATA[ORIGIN : ORIGIN + LENGTH]
    file.close()
    assert failures == []
