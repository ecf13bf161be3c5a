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


def process_seconds(pids: list[int]) -> float:
    """CPU seconds the processes (every thread of each) have used; 0 for one that is gone."""
    total = 0.0
    for pid in pids:
        try:
            # The process's CPU-time clock (clock_getcpuclockid: CPUCLOCK_SCHED of the pid).
            total += time.clock_gettime(((~pid) << 3) | 2)
        except PermissionError:  # another user's process: its ticks, which anyone may read
            with contextlib.suppress(FileNotFoundError):
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
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
    those that ended (a backend's whole life, once the postmaster has reaped it)."""
    stat = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
    reaped = (int(stat[13]) + int(stat[14])) / _TICKS  # cutime, cstime (fields 16 and 17)
    running = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()
    return reaped + process_seconds([postmaster, *map(int, running)])


def postmaster_of(url: str) -> int | None:
    """The pid of the server at url when it runs on this machine, else None."""
    with psycopg.connect(url, autocommit=True) as conn:
        (backend,) = conn.execute("SELECT pg_backend_pid()").fetchone()
        try:
            stat = Path(f"/proc/{backend}/stat").read_text()
        except FileNotFoundError:  # a server elsewhere: its pid means nothing here
            return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # ppid (field 4)


@dataclass(frozen=True)
class Usage:
    """CPU seconds the machine and the database server used (None: not on this machine)."""

    machine: float
    database: float | None

    def since(self, before: Usage) -> Usage:
        """What was used from `before` to this reading."""
        database = None
        if self.database is not None and before.database is not None:
            database = self.database - before.database
        return Usage(self.machine - before.machine, database)

    def per(self, units: int) -> Usage:
        """Microseconds per unit of work."""
        database = None if self.database is None else self.database / units * 1e6
        return Usage(self.machine / units * 1e6, database)


@dataclass(frozen=True)
class Meter:
    """Reads the machine's CPU and, where it runs here, the database server's."""

    postmaster: int | None = None

    def read(self) -> Usage:
        """Both counters now."""
        database = None if self.postmaster is None else server_seconds(self.postmaster)
        return Usage(machine_seconds(), database)
