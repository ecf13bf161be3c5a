"""Coordinator blips on the real stack: the worker rides them out within its lease.

A blip is what a worker sees while the coordinator's database restarts or a proxy in front of
it recycles: its connections drop, and for a moment every request is answered 503. The
BlippingLink relay makes exactly that happen, on cue, between one real worker process and the
real gunicorn (PostgreSQL itself is shared and is never stopped).
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time

from devstack.observe import SHORT_POLL, big_csv, events, totals_of

OUTAGE_SECONDS = 0.8


class BlippingLink:
    """A TCP relay to the coordinator that blips: it cuts every connection it carries, then
    answers each new one with 503 + Retry-After for OUTAGE_SECONDS.

    It blips `input_cuts` times, each after `cut_every_bytes` more bytes went to the worker
    (only an input stream is that large), then `result_cuts` times as a batch of results is
    posted.
    """

    def __init__(self, port: int, *, input_cuts: int, cut_every_bytes: int, result_cuts: int):
        self._target = port
        self._input_cuts_left = input_cuts
        self._cut_every = cut_every_bytes
        self._result_cuts_left = result_cuts
        self._sent_since_cut = 0
        self._down_until = 0.0
        self._live: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.blips: list[str] = []
        self.answered_503 = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        """Stop accepting connections."""
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                near, _ = self._listener.accept()
            except OSError:
                return  # closed
            if time.monotonic() < self._down_until:
                threading.Thread(target=self._answer_503, args=(near,), daemon=True).start()
                continue
            far = socket.create_connection(("127.0.0.1", self._target))
            with self._lock:
                self._live |= {near, far}
            threading.Thread(
                target=self._relay, args=(near, far, self._to_coordinator), daemon=True
            ).start()
            threading.Thread(
                target=self._relay, args=(far, near, self._to_worker), daemon=True
            ).start()

    def _relay(self, source: socket.socket, sink: socket.socket, passes) -> None:
        try:
            while (data := source.recv(65536)) and passes(data):
                sink.sendall(data)
        except OSError:
            pass  # cut, or either side went away
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
                end.close()

    def _to_coordinator(self, data: bytes) -> bool:
        with self._lock:
            # A batch of results, alone or completing and fetching (?claim=N).
            if self._result_cuts_left and re.search(rb"/results(\?\S*)? HTTP/1\.1", data):
                self._result_cuts_left -= 1
                self._blip("result")
                return False
        return True

    def _to_worker(self, data: bytes) -> bool:
        with self._lock:
            self._sent_since_cut += len(data)
            if self._input_cuts_left and self._sent_since_cut >= self._cut_every:
                self._input_cuts_left -= 1
                self._blip("input")
                return False
        return True

    def _blip(self, during: str) -> None:
        # Called holding the lock.
        self.blips.append(during)
        self._sent_since_cut = 0
        self._down_until = time.monotonic() + OUTAGE_SECONDS
        for end in self._live:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
        self._live.clear()

    def _answer_503(self, near: socket.socket) -> None:
        near.settimeout(2)
        try:
            head = b""
            while b"\r\n\r\n" not in head and (data := near.recv(65536)):
                head += data
            _, _, rest = head.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            while len(rest) < length and (data := near.recv(65536)):
                rest += data  # read the body, so closing does not reset the connection
            body = json.dumps(
                {
                    "error": {"code": "unavailable", "message": "restarting", "details": {}},
                    "trace_id": None,
                }
            ).encode()
            near.sendall(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                b"Retry-After: 1\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            with self._lock:
                self.answered_503 += 1
        except OSError:
            pass
        finally:
            near.close()


def test_three_coordinator_blips_on_one_chunk_spend_no_attempt_and_the_job_succeeds(stack, jobs):
    data = big_csv(150_000)  # one chunk of about 3.4 MB
    # The worker reads its input in 1 MiB blocks: a cut 1.5 MB in finds one block handed on,
    # so the reopened stream must resume after it (a Range from byte 2**20).
    link = BlippingLink(stack.port, input_cuts=2, cut_every_bytes=1_500_000, result_cuts=1)
    try:
        job = jobs.submit(data, 1)
        stack.start_worker("worker", *SHORT_POLL, "--capacity", "1", "--coordinator", link.url)

        done = jobs.wait(job["id"], "succeeded", timeout=60)
    finally:
        link.close()

    assert done["result"] == totals_of(data)
    assert link.blips == ["input", "input", "result"]
    assert link.answered_503 >= 1, "no request met the outage's 503"
    [chunk] = jobs.chunks(job["id"])
    assert [(a["worker_id"], a["state"]) for a in chunk["attempts"]] == [("worker", "completed")]
    retried = events(stack, "worker", "backoff")
    assert {line["during"] for line in retried} == {"input", "result"}
    assert [line["resume_at_byte"] for line in retried if line["during"] == "input"][0] == 2**20
    assert not events(stack, "worker", "failed", "failure_reported", "dropped")
