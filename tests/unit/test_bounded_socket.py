"""gunicorn.conf.py: sockets that cannot hold a thread for long, and the wait for a next request."""

from __future__ import annotations

import functools
import importlib.util
import io
import socket
import threading
import time
import types

import pytest

from app.config import REPO_ROOT


@pytest.fixture
def conf(monkeypatch, tmp_path):
    """gunicorn.conf.py as a module, with short bounds (it sets no metrics directory here)."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    spec = importlib.util.spec_from_file_location("gunicorn_conf", REPO_ROOT / "gunicorn.conf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "HEADER_SECONDS", 0.6)
    monkeypatch.setattr(module, "STALL_SECONDS", 0.3)
    return module


@pytest.fixture
def pair(conf):
    """A bounded server end, set blocking as gthread sets it, and the client's end."""
    server, client = socket.socketpair()
    bounded = conf.BoundedSocket.taking_over(server)
    bounded.setblocking(True)
    yield bounded, client
    bounded.close()
    client.close()


def test_headers_trickled_past_their_deadline_read_as_end_of_file(pair):
    server, client = pair
    server.expect_headers()
    client.sendall(b"GET / HTTP/1.1\r\n")
    started = time.monotonic()
    received = b""
    while chunk := server.recv(100):
        received += chunk
        client.sendall(b"X")  # a byte well within each stall bound, forever
        time.sleep(0.1)

    assert 0.6 <= time.monotonic() - started < 1.0
    assert received.startswith(b"GET / HTTP/1.1\r\nXX")


def test_a_stalled_header_reads_as_end_of_file(pair):
    server, _client = pair
    server.expect_headers()
    started = time.monotonic()

    assert server.recv(100) == b""
    assert 0.3 <= time.monotonic() - started < 0.6


def test_a_stalled_body_raises_body_stalled_a_400_and_a_timeout(conf, pair):
    server, _client = pair
    server.headers_read()

    with pytest.raises(conf.BodyStalled) as stalled:
        server.recv(100)
    assert stalled.value.code == 400
    assert isinstance(stalled.value, TimeoutError)


def gunicorn_body(server, length: int, read_ahead: bytes = b""):
    """gunicorn's body of a request of `length` bytes, `read_ahead` read with its headers."""
    from gunicorn.http.body import Body, LengthReader
    from gunicorn.http.unreader import SocketUnreader

    unreader = SocketUnreader(server)
    unreader.unread(read_ahead)
    return Body(LengthReader(unreader, length))


def read_all_into(body, block: int) -> bytes:
    buffer, received = memoryview(bytearray(block)), b""
    while got := body.readinto(buffer):
        received += bytes(buffer[:got])
    return received


def test_a_body_is_received_into_the_buffer_and_the_next_request_kept_for_it(conf, pair):
    server, client = pair
    server.headers_read()
    body = b"id,value\n" + b"1,2\n" * 5000
    client.sendall(body[100:] + b"GET /next HTTP/1.1\r\n")

    gunicorn = gunicorn_body(server, len(body), read_ahead=body[:100])

    assert read_all_into(gunicorn, 4096) == body
    assert gunicorn.reader.length == 0 and not gunicorn.failed
    assert gunicorn.reader.unreader.read() == b"GET /next HTTP/1.1\r\n"


def test_a_body_read_ahead_past_its_end_leaves_the_rest_to_the_next_request(conf, pair):
    server, _client = pair
    server.headers_read()

    gunicorn = gunicorn_body(server, 5, read_ahead=b"hello" + b"GET / HTTP/1.1\r\n")

    assert read_all_into(gunicorn, 4096) == b"hello"
    assert gunicorn.reader.unreader.read() == b"GET / HTTP/1.1\r\n"


def test_a_body_cut_short_reads_to_its_end_of_file(conf, pair):
    server, client = pair
    server.headers_read()
    client.sendall(b"id,x\n1,2\n")
    client.shutdown(socket.SHUT_WR)

    assert read_all_into(gunicorn_body(server, 1000), 4096) == b"id,x\n1,2\n"


def test_a_stalled_body_read_into_a_buffer_raises_body_stalled_and_fails_the_connection(conf, pair):
    server, client = pair
    server.headers_read()
    client.sendall(b"id,x\n")
    gunicorn = gunicorn_body(server, 1000)

    with pytest.raises(conf.BodyStalled):
        read_all_into(gunicorn, 4096)
    assert gunicorn.failed


def test_a_slow_reader_that_keeps_reading_gets_a_whole_answer_longer_than_a_stall(pair):
    server, client = pair
    answer = b"x" * 4_000_000
    received = bytearray()

    def read_slowly() -> None:
        while len(received) < len(answer):
            received.extend(client.recv(400_000))
            time.sleep(0.05)

    reader = threading.Thread(target=read_slowly)
    reader.start()
    started = time.monotonic()
    server.sendall(answer)
    reader.join(timeout=10)

    assert time.monotonic() - started > 0.3  # longer than one stall: only stalls are bounded
    assert bytes(received) == answer


def test_a_reader_that_stops_reading_is_cut_off_after_a_stall(pair):
    server, _client = pair

    with pytest.raises(TimeoutError):
        server.sendall(b"x" * 20_000_000)


@pytest.fixture
def lingering(conf):
    """A worker's next_request_soon on a socket pair, with one linger slot."""
    server, client = socket.socketpair()
    worker = types.SimpleNamespace(lingering=threading.BoundedSemaphore(1))
    parser = types.SimpleNamespace(unreader=types.SimpleNamespace(buf=io.BytesIO()))
    conn = types.SimpleNamespace(sock=server, parser=parser, is_http2=False)
    soon = functools.partial(conf.OrphanAwareThreadWorker.next_request_soon, worker, conn)
    yield soon, worker, conn, client
    server.close()
    client.close()


def test_a_next_request_sent_within_the_linger_is_served_by_the_same_thread(conf, lingering):
    soon, _worker, _conn, client = lingering
    threading.Timer(conf.LINGER_SECONDS / 4, client.sendall, [b"GET / HTTP/1.1\r\n"]).start()

    assert soon() is True


def test_a_quiet_connection_goes_back_to_the_poller_after_the_linger(conf, lingering):
    soon, worker, _conn, _client = lingering
    started = time.monotonic()

    assert soon() is False
    assert conf.LINGER_SECONDS <= time.monotonic() - started < conf.LINGER_SECONDS + 0.2
    assert worker.lingering.acquire(blocking=False)  # its slot was given back


def test_a_request_read_ahead_is_served_without_waiting(lingering):
    soon, worker, conn, _client = lingering
    conn.parser.unreader.buf.write(b"GET / HTTP/1.1\r\n")
    worker.lingering.acquire()  # no slot free: it needs none

    assert soon() is True


def test_with_every_linger_slot_taken_the_connection_goes_back_to_the_poller_at_once(lingering):
    soon, worker, _conn, client = lingering
    client.sendall(b"GET / HTTP/1.1\r\n")
    worker.lingering.acquire()

    assert soon() is False


def test_an_http2_connection_goes_back_to_gthread_at_once(lingering):
    soon, _worker, conn, client = lingering
    conn.is_http2, conn.parser = True, object()  # an HTTP/2 connection has no unreader
    client.sendall(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")  # a SETTINGS frame

    assert soon() is False
