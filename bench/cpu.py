"""CPU time as the benches read it: a process's own clock, a database server's processes, the
whole machine."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import psycopg

_TICKS = os.sysconf("SC_CLK_TCK")
# Readings of a server taken before settling for one during which backends kept being reaped.
_READ_TRIES = 20


def process_seconds(pids: list[int]) -> float:
    """CPU seconds the processes (every thread of each) have used; 0 for one that is gone."""
    total = 0.0
    for pid in pids:
        try:
            # The process's CPU-time clock (clock_getcpuclockid: CPUCLOCK_SCHED of the pid).
            total += time.clock_gettime(((~pid) << 3) | 2)
        except PermissionError:  # another user's process: its ticks, which anyone may read
            with contextlib.suppress(FileNotFoundError):
                stat = _stat(pid)
                total += (int(stat[11]) + int(stat[12])) / _TICKS  # utime, stime
        except OSError:  # gone
            pass
    return total


def machine_seconds() -> float:
    """CPU seconds the machine's cores have spent running anything since boot (not idle, not
    waiting for I/O, not stolen by the hypervisor)."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0)


def machine_idle_seconds() -> float:
    """Seconds every core has spent idle (or waiting for I/O) since boot."""
    times = psutil.cpu_times()
    return times.idle + getattr(times, "iowait", 0.0)


def server_seconds(postmaster: int) -> float:
    """CPU seconds of a PostgreSQL server: its postmaster, the processes it runs now, and
    those that ended (a backend's whole life, once the postmaster has reaped it).

    A backend reaped while the server is read would be in neither part (a test that read just
    after closing its connection once saw 0.001 s of a 0.2 s backend), so the reading is taken
    again until the reaped part is the same before and after it.
    """
    reaped = _reaped_seconds(postmaster)
    for _ in range(_READ_TRIES):
        running = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()
        seconds = reaped + process_seconds([postmaster, *map(int, running)])
        after = _reaped_seconds(postmaster)
        if after == reaped:
            break
        reaped = after
    return seconds


def _reaped_seconds(postmaster: int) -> float:
    """CPU seconds of the processes the postmaster has reaped (whole ticks)."""
    stat = _stat(postmaster)
    return (int(stat[13]) + int(stat[14])) / _TICKS  # cutime, cstime


def postmaster_of(conn: psycopg.Connection) -> int | None:
    """The pid of the server a connection is to when it runs on this machine, else None."""
    (backend,) = conn.execute("SELECT pg_backend_pid()").fetchone()
    try:
        return int(_stat(backend)[1])  # ppid
    except FileNotFoundError:  # a server elsewhere: its pid means nothing here
        return None


def _stat(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command's name: [0] is field 3 (state)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


@dataclass(frozen=True)
class Usage:
    """CPU seconds the machine and the database server used, and the bytes of WAL the server
    wrote (None: not measured, the server is elsewhere or not watched)."""

    machine: float
    database: float | None = None
    wal: float | None = None

    def since(self, before: Usage) -> Usage:
        """What was used from `before` to this reading."""
        return Usage(
            self.machine - before.machine,
            _minus(self.database, before.database),
            _minus(self.wal, before.wal),
        )

    def per(self, units: int) -> Usage:
        """CPU microseconds and WAL bytes per unit of work."""
        database = None if self.database is None else self.database / units * 1e6
        wal = None if self.wal is None else self.wal / units
        return Usage(self.machine / units * 1e6, database, wal)


def _minus(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


class Meter:
    """Reads the machine's CPU and, given a database server, the WAL it has written and its
    processes' CPU where it runs on this machine."""

    def __init__(self, server_url: str | None = None):
        self.conn = None if server_url is None else psycopg.connect(server_url, autocommit=True)
        self.postmaster = None if self.conn is None else postmaster_of(self.conn)

    def read(self) -> Usage:
        """Every counter now."""
        if self.conn is None:
            return Usage(machine_seconds())
        (wal,) = self.conn.execute(_WAL_WRITTEN).fetchone()
        database = None if self.postmaster is None else server_seconds(self.postmaster)
        return Usage(machine_seconds(), database, float(wal))

    def close(self) -> None:
        """Close the connection to the server."""
        if self.conn is not None:
            self.conn.close()


# Bytes of WAL inserted since the server's first: a difference of two readings is what was
# written between them (its own SELECT writes none).
_WAL_WRITTEN = "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')"
