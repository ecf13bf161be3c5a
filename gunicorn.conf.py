"""Gunicorn settings for the coordinator: threaded workers with room for long polls."""

import json
import os
import select
import selectors
import socket
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

from gunicorn import util
from gunicorn.http.body import Body, LengthReader
from gunicorn.http.unreader import SocketUnreader
from gunicorn.workers.gthread import TConn, ThreadWorker
from werkzeug.exceptions import ClientDisconnected

# Counters must be summed over every worker process: prometheus_client's multiprocess mode
# keeps them in files here. This file is read before the workers import the app, so setting
# the directory now covers every process.
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="chunkwise-metrics-"))


# A client talking to gunicorn directly (no proxy in front) has this long from the first byte
# of a request to the end of its headers, and no read of its body nor write of the answer may
# stall longer than STALL_SECONDS. Behind nginx neither is ever near: it sends whole requests.
HEADER_SECONDS = 10.0
STALL_SECONDS = 30.0
# A thread that has answered a kept-alive request waits this long on the connection for the
# client's next one before handing it back to the poller, but only while a quarter of the
# threads at most are so waiting (see OrphanAwareThreadWorker.handle).
LINGER_SECONDS = 0.01


class BodyStalled(ClientDisconnected, TimeoutError):
    """The client stopped sending its request body: 400, and nothing it sent is kept.

    A TimeoutError too, so gunicorn's own reads (draining, closing) take it as a timeout.
    """

    description = f"the request body stalled for {STALL_SECONDS:.0f} s"


class BoundedSocket(socket.socket):
    """A client connection whose reads and writes cannot hold a thread for long.

    gthread reads a request's headers, and the app its body, with blocking calls that have no
    timeout: a client sending a byte now and then would hold a thread for good. A header read
    past the headers' deadline, or stalled, returns end of file: gunicorn takes the client for
    gone and closes the connection, quietly. A stalled body read raises BodyStalled: an end of
    file there would hand the app a cut body as if it were whole.
    """

    @classmethod
    def taking_over(cls, sock: socket.socket) -> "BoundedSocket":
        """The same connection, bounded (the old object lets go of the descriptor)."""
        bounded = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        bounded.headers_read()
        return bounded

    def setblocking(self, flag: bool) -> None:
        # gthread makes the socket blocking for each request: bounded instead of blocking.
        if flag:
            self.settimeout(STALL_SECONDS)
        else:
            super().setblocking(False)

    def expect_headers(self) -> None:
        """A request starts: its headers' clock runs from the first byte read."""
        self._reading_headers, self._deadline = True, None

    def headers_read(self) -> None:
        """The headers are in: only stalls are bounded from now on."""
        self._reading_headers, self._deadline = False, None
        self.settimeout(STALL_SECONDS)

    def recv(self, size: int, flags: int = 0) -> bytes:
        if self._reading_headers:
            now = time.monotonic()
            if self._deadline is None:
                self._deadline = now + HEADER_SECONDS
            if self._deadline <= now:
                return b""
            self.settimeout(min(self._deadline - now, STALL_SECONDS))
            try:
                return super().recv(size, flags)
            except TimeoutError:
                return b""
        try:
            return super().recv(size, flags)
        except TimeoutError as exc:
            raise BodyStalled() from exc

    def recv_into(self, buffer, nbytes: int = 0, flags: int = 0) -> int:
        # Only a body is read this way (read_body_into): a stall is bounded, never the read.
        try:
            return super().recv_into(buffer, nbytes, flags)
        except TimeoutError as exc:
            raise BodyStalled() from exc

    def sendall(self, data, flags: int = 0) -> None:
        # socket.sendall's timeout bounds the whole write: a 1 MiB block of a task's input to
        # a reader on a slow link would be cut at 30 s. A stall, not the write, is bounded.
        left = memoryview(data).cast("B")
        while left:
            left = left[self.send(left, flags) :]


class OrphanAwareThreadWorker(ThreadWorker):
    """A gthread worker that gives the port back as soon as its master is gone.

    A worker whose master was SIGKILLed notices within a second (gthread checks its parent
    once per loop) and then drains for up to graceful_timeout, long polls included, with the
    listening socket still open: no new master could bind the port for ~30 s. This worker
    closes its listeners the moment it sees the master gone, after taking in the connections
    already queued on them, and lets the drain answer every request it had accepted.

    It also gives a new connection no thread until it has sent something (accept), and lets a
    thread that answered a kept-alive request serve the client's next one if it follows
    quickly (handle).
    """

    def is_parent_alive(self) -> bool:
        if super().is_parent_alive():
            return True
        for listener in self.sockets:
            queued = select.poll()
            queued.register(listener, select.POLLIN)
            # At most a backlog's worth: what is queued now, not what keeps arriving.
            for _ in range(self.cfg.backlog):
                if not queued.poll(0):
                    break
                self.accept(listener)
        self.set_accept_enabled(False)
        for listener in self.sockets:
            listener.close()
        self.log.info("Master gone: listeners closed, draining %s connections", self.nr_conns)
        return False

    def accept(self, listener) -> None:
        """Take a connection in without a thread: it gets one once it has sent something.

        gthread hands a new connection to a thread that waits up to 5 s for its first byte,
        so idle connections could take every thread; here the poller waits instead, up to the
        keepalive timeout, as it does for a deferred connection.
        """
        try:
            client, address = listener.accept()
        except (BlockingIOError, ConnectionAbortedError):
            return
        self.nr_conns += 1
        conn = TConn(self.cfg, BoundedSocket.taking_over(client), address, listener.getsockname())
        conn.timeout = time.monotonic() + self.cfg.keepalive
        self.pending_conns.append(conn)
        self.poller.register(
            conn.sock, selectors.EVENT_READ, partial(self.on_pending_socket_readable, conn)
        )

    def init_process(self) -> None:
        self.lingering = threading.BoundedSemaphore(max(1, self.cfg.threads // 4))
        super().init_process()

    def handle(self, conn):
        """Serve the connection's requests, each with its headers on the clock, while the next
        one follows within LINGER_SECONDS.

        gthread hands a kept-alive connection back to its poller after every request: two
        wake-ups of the main thread and a thread-pool hand-off per request. A busy client's
        next request usually arrives within milliseconds, and is served here at once.
        """
        while True:
            conn.sock.expect_headers()
            keepalive = super().handle(conn)
            if keepalive is not True or not self.alive or not self.next_request_soon(conn):
                return keepalive

    def next_request_soon(self, conn) -> bool:
        """Whether the client sent its next request within LINGER_SECONDS (a spare thread
        waiting for it); False hands the connection back to the poller."""
        if conn.is_http2:
            return False  # its streams are gthread's own to serve
        if conn.parser.unreader.buf.getvalue():
            return True  # a drained body read ahead into the next request
        if not self.lingering.acquire(blocking=False):
            return False
        try:
            arrival = select.poll()
            arrival.register(conn.sock, select.POLLIN)
            return bool(arrival.poll(LINGER_SECONDS * 1000))
        finally:
            self.lingering.release()

    def handle_request(self, req, conn):
        """Run the app: the headers are in, only a stalled body or answer is bounded now."""
        conn.sock.headers_read()
        return super().handle_request(req, conn)


def write_json_error(sock, status_int: int, reason: str, mesg: str) -> None:
    """Answer gunicorn's own refusals in the API's error body, where it writes an HTML page.

    gunicorn refuses some requests before the app sees them: a malformed request line or
    header (400), a request line past limit_request_line (414), too many or too long headers
    (431). Its workers call util.write_error by module attribute, so this replaces it.
    """
    code = {400: "malformed_request", 500: "internal_error"}.get(
        status_int, reason.lower().replace(" ", "_")
    )
    body = json.dumps({"error": {"code": code, "message": mesg or reason, "details": {}}}).encode()
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    util.write_nonblock(sock, head.encode("latin-1") + body)


util.write_error = write_json_error


def read_body_into(body: Body, buffer) -> int:
    """Body.readinto: a body of known length received straight into the reader's buffer.

    werkzeug reads a request's stream through readinto where it has one; gunicorn's Body has
    only read, which passes each mebibyte through four BytesIO copies holding the GIL: reading
    and spooling a 22.6 MiB upload took 22-58 ms of CPU, received into the buffer 11-16 ms.
    What gunicorn read ahead with the headers is taken first; any other body reads as before.
    """
    reader, view = body.reader, memoryview(buffer).cast("B")
    direct = isinstance(reader, LengthReader) and isinstance(reader.unreader, SocketUnreader)
    if not direct or body.buf.tell():
        data = body.read(len(view))
        view[: len(data)] = data
        return len(data)
    wanted = min(len(view), reader.length)
    if not wanted:
        return 0
    try:
        held = reader.unreader.take_buffered()
        if held:
            got = min(len(held), wanted)
            view[:got] = held[:got]
            if got < len(held):
                reader.unreader.unread(held[got:])  # the next request's, kept alive
        else:
            got = reader.unreader.sock.recv_into(view, wanted)
    except Exception:
        body.failed = True  # where the next request starts is unknown: the connection closes
        raise
    reader.length -= got
    return got


Body.readinto = read_body_into

wsgi_app = "app:create_app(storage_fatal=False)"
bind = os.environ.get("CHUNKWISE_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("CHUNKWISE_WEB_WORKERS", "2"))
worker_class = OrphanAwareThreadWorker
# A waiting claim holds a thread (never a pooled connection) for up to 30 s, so each
# process keeps plenty of threads for user requests beside the long polls.
threads = int(os.environ.get("CHUNKWISE_WEB_THREADS", "32"))
timeout = 60
graceful_timeout = 30
keepalive = 5
# A text/csv upload carries its column and labels in the query string: the largest request
# line gunicorn takes (its default is 4,094 bytes); past it gunicorn answers 414 itself.
limit_request_line = 8190
# One pool per process: create_app runs in each worker, never before the fork.
preload_app = False
accesslog = None
# gunicorn 25.1+ opens a control socket (for gunicornc) under $HOME: nothing here uses it, the
# image's user has no home (every start logged Permission denied), and two coordinators on one
# host would share the path. An older gunicorn skips names it does not know.
control_socket_disable = True


def on_starting(server):
    """Refuse to start on unusable storage; forget the counters of a previous run."""
    from app.config import ConfigError, load_settings
    from app.runtime import require_storage
    from app.ui_session import SECRET_KEY_FILE, shared_secret_key

    # Checked here, once, so a misconfiguration stops the coordinator at start; a worker
    # process booting later only reports it (create_app(storage_fatal=False)).
    try:
        settings = load_settings()
        require_storage(settings)
    except ConfigError as exc:
        # A line per problem and exit 1, not a traceback: nothing is bound or forked yet.
        raise SystemExit(f"chunkwise: {exc.message}") from None
    # Every worker process signs the dashboard's cookies with one key: the master settles it
    # now and hands it down, so a worker booting while storage is broken still has it.
    if not settings.secret_key:
        key_file = settings.archive_dir.parent / SECRET_KEY_FILE
        os.environ["CHUNKWISE_SECRET_KEY"] = shared_secret_key(key_file)
    directory = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink()


def post_worker_init(worker):
    """Start this process's maintenance loop."""
    from app.maintenance import start

    app = worker.wsgi
    start(app, app.config["CHUNKWISE_SETTINGS"].maintenance_seconds)


def child_exit(server, worker):
    """Let the multiprocess metrics forget a dead worker's live gauges."""
    from prometheus_flask_exporter.multiprocess import GunicornInternalPrometheusMetrics

    GunicornInternalPrometheusMetrics.mark_process_dead_on_child_exit(worker.pid)


def worker_exit(server, worker):
    """Close the pool and the listener on a graceful stop."""
    from app.runtime import close

    app = getattr(worker, "wsgi", None)
    if app is not None and "chunkwise.runtime" in getattr(app, "extensions", {}):
        close(app.extensions["chunkwise.runtime"])
