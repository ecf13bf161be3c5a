"""The benches' CPU readings: per process, for a database server's processes, for the machine."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench import cpu
from bench.cpu import Meter, Usage, machine_seconds, process_seconds, server_seconds

BURN = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"


def test_usage_since_a_reading_is_the_difference_and_none_where_either_side_lacks_it():
    assert Usage(5.0, 2.0, 900.0).since(Usage(3.0, 1.5, 100.0)) == Usage(2.0, 0.5, 800.0)
    assert Usage(5.0, None, 900.0).since(Usage(3.0, 1.5, 100.0)) == Usage(2.0, None, 800.0)
    assert Usage(5.0, 2.0).since(Usage(3.0, None, 100.0)) == Usage(2.0)


def test_usage_per_unit_is_cpu_microseconds_and_wal_bytes():
    assert Usage(2.0, 0.5, 3e6).per(1000) == Usage(2000.0, 500.0, 3000.0)
    assert Usage(2.0).per(1000) == Usage(2000.0)


def test_a_server_counts_the_cpu_of_its_processes_that_ended():
    # This process stands for the postmaster: a child that burns CPU and is reaped counts.
    before = server_seconds(os.getpid())
    subprocess.run([sys.executable, "-c", BURN], check=True)

    assert server_seconds(os.getpid()) - before >= 0.25


def test_a_server_counts_the_cpu_of_its_processes_still_running():
    child = subprocess.Popen([sys.executable, "-c", BURN + "\ninput()"], stdin=subprocess.PIPE)
    try:
        before = server_seconds(os.getpid())
        while process_seconds([child.pid]) < 0.3 and child.poll() is None:
            time.sleep(0.01)  # sleeping, so this process adds next to nothing itself
        assert child.poll() is None
        assert server_seconds(os.getpid()) - before >= 0.25
    finally:
        child.communicate(b"\n")


def test_a_process_reaped_while_the_server_is_read_is_counted(monkeypatch):
    # The reaped part grows between its two reads: the first reading may have missed a
    # process (gone from the running ones, not yet among the reaped), so it is taken again.
    reaped = iter([1.0, 2.0, 2.0, 2.0])
    monkeypatch.setattr(cpu, "_reaped_seconds", lambda pid: next(reaped))
    monkeypatch.setattr(cpu, "process_seconds", lambda pids: 0.5)

    assert server_seconds(os.getpid()) == 2.5


def test_the_machine_reading_grows_with_work_and_a_meter_without_a_server_reads_none():
    before = Meter().read()
    subprocess.run([sys.executable, "-c", BURN], check=True)
    after = Meter().read()

    assert after.database is None
    assert after.since(before).machine >= 0.2
    assert machine_seconds() >= after.machine


def test_a_pid_with_no_process_counts_nothing():
    assert process_seconds([2**22 + 12345]) == 0.0


def test_another_users_process_is_read_from_its_ticks(monkeypatch):
    def refused(clock):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(time, "clock_gettime", refused)

    # This process has run pytest so far: well over a tick of CPU.
    assert process_seconds([os.getpid()]) >= 0.05
