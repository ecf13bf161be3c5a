"""Faults the e2e tests and the reliability report inflict on the real stack."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import psutil

# The advisory lock a held merge waits on: HOLD_MERGE_SQL's trigger stops the merge's final
# UPDATE of its job (to succeeded) until whoever took this lock lets it go, so the merge is
# stuck inside its transaction with every chunk committed and the job `merging`. (A row lock
# from outside would block the last chunk's completion instead, which locks the job too.)
MERGE_HOLD = 0x45324548
HOLD_MERGE_SQL = f"""
    CREATE OR REPLACE FUNCTION chunkwise_hold_merge() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN PERFORM pg_advisory_xact_lock_shared({MERGE_HOLD}); RETURN NEW; END $$;
    CREATE TRIGGER chunkwise_hold_merge BEFORE UPDATE ON jobs FOR EACH ROW
        WHEN (NEW.status = 'succeeded') EXECUTE FUNCTION chunkwise_hold_merge();
"""
RELEASE_MERGE_SQL = "DROP TRIGGER IF EXISTS chunkwise_hold_merge ON jobs"


class SlowLink:
    """A TCP relay to the coordinator that sends its replies at a limited rate, like a slow
    network, so that a chunk is still being read and computed when something happens to it."""

    def __init__(self, port: int, bytes_per_second: int):
        self._target = port
        self._rate = bytes_per_second
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                near, _ = self._listener.accept()
            except OSError:
                return  # closed
            far = socket.create_connection(("127.0.0.1", self._target))
            threading.Thread(target=self._relay, args=(near, far, None), daemon=True).start()
            threading.Thread(target=self._relay, args=(far, near, self._rate), daemon=True).start()

    @staticmethod
    def _relay(source: socket.socket, sink: socket.socket, rate: int | None) -> None:
        try:
            while data := source.recv(16384):
                sink.sendall(data)
                if rate:
                    time.sleep(len(data) / rate)
        except OSError:
            pass  # either side went away
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Stop accepting connections."""
        self._listener.close()


def listening_pids(port: int) -> set[int]:
    """The processes with a socket listening on the port."""
    return {
        c.pid
        for c in psutil.net_connections("tcp")
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid
    }


def running(pid: int) -> bool:
    """Whether the process exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
