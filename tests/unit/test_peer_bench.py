"""The peer bench's pure parts: rates, ratios to the same turn's pgbench, the table, and
skipping a peer whose package or broker is missing."""

from __future__ import annotations

import pytest

from bench.cpu import Meter, Usage
from bench.peers import __main__ as peers_main
from bench.peers.__main__ import every_peer, idle_cores, parse_args
from bench.peers.celery_peer import CeleryPeer
from bench.peers.figures import Drain, Row, ratio, spread, table, turn_line, turn_ratios
from bench.peers.finished import finished_at
from bench.peers.peer import Unavailable, require_module, start_available
from bench.peers.procrastinate_peer import ProcrastinatePeer
from devstack.stack import free_port


def test_a_drain_rate_is_tasks_over_seconds_and_none_when_it_timed_out():
    assert Drain("q", 1, 4000, 2.0).tasks_per_s == 2000
    assert Drain("q", 1, 4000, None).tasks_per_s is None


def test_a_ratio_needs_both_sides():
    assert ratio(1000.0, 2500.0) == 0.4
    assert ratio(None, 2500.0) is None
    assert ratio(1000.0, None) is None
    assert ratio(1000.0, 0.0) is None


def test_spread_is_median_lowest_highest_of_the_values_present():
    assert spread([3.0, None, 1.0, 2.0]) == (2.0, 1.0, 3.0)
    assert spread([None]) is None
    assert spread([]) is None


def test_each_drain_is_compared_with_pgbench_of_its_own_turn_and_client_count():
    pgbench = {(1, 4): 2000.0, (2, 4): 1000.0, (1, 16): 4000.0}
    drains = [Drain("q", 1, 1000, 1.0), Drain("q", 2, 1000, 1.0), Drain("q", 3, 1000, 1.0)]

    assert turn_ratios(drains, pgbench, 4) == [0.5, 1.0, None]
    assert turn_ratios(drains[:1], pgbench, 16) == [0.25]


def test_the_table_gives_median_and_range_per_system_and_skips_timed_out_turns():
    rows = [Row("A", 4, "yes"), Row("B", 16, "no"), Row("C", 4, "yes")]
    pgbench = {(1, 4): 1000.0, (2, 4): 2000.0, (3, 4): 1000.0, (1, 16): 1000.0}
    drains = [
        Drain("A", 1, 1000, 2.0, cpu_us_per_task=300.0, usage=Usage(2.0, 0.5, 4e6)),
        Drain("A", 2, 1000, 1.0, cpu_us_per_task=100.0, usage=Usage(1.0, 0.3, 2e6)),
        Drain("A", 3, 1000, None, usage=Usage(9.0, 9.0, 9.0)),
        Drain("B", 1, 1000, 0.5, usage=Usage(1.5)),
    ]
    per_transaction = {(1, 4): Usage(700.0, 500.0, 300.0), (2, 4): Usage(900.0, 600.0, 400.0)}

    lines = table(rows, drains, pgbench, per_transaction)

    assert lines[2] == (
        "| A | 0.50 (0.50-0.50) of pgbench -c 4, 2 turns | 750 (500-1000) | 200 (100-300) "
        "| 1500 (1000-2000) | 400 (300-500) | 3000 (2000-4000) | yes |"
    )
    assert lines[3] == (
        "| B | 2.00 (2.00-2.00) of pgbench -c 16, 1 turns | 2000 (2000-2000) | - "
        "| 1500 (1500-1500) | - | - | no |"
    )
    assert lines[4] == "| C | - of pgbench -c 4, 0 turns | - | - | - | - | - | yes |"
    assert lines[5] == (
        "| pgbench -N -c 4 | 1.00 | 1000 (1000-2000) TPS | - "
        "| 800 (700-900) | 550 (500-600) | 350 (300-400) | yes |"
    )
    assert lines[6] == "| pgbench -N -c 16 | 1.00 | 1000 (1000-1000) TPS | - | - | - | - | yes |"


def test_a_turn_line_shows_the_ratio_and_cpu_or_that_it_timed_out():
    used = Usage(machine=1.5, database=0.6, wal=3_000_000)
    drain = Drain("A", 2, 1000, 0.5, submit_seconds=0.1, cpu_us_per_task=250.0, usage=used)

    line = turn_line(drain, 4000.0)

    assert "2000 tasks/s" in line and "0.50x pgbench (4000 TPS)" in line
    assert "coordinator CPU 250 us/task" in line and "submitted in 0.10 s" in line
    assert line.endswith("machine CPU 1500 us/task, database 600 us, WAL 3000 B")
    assert turn_line(Drain("A", 2, 1000, None), 4000.0).endswith("timed out")


def test_a_drain_without_the_database_server_here_shows_the_machine_alone():
    line = turn_line(Drain("A", 1, 1000, 1.0, usage=Usage(machine=0.9)), None)

    assert line.endswith("machine CPU 900 us/task")


def test_the_cores_busy_while_idle_are_the_machines_cpu_over_the_pause(monkeypatch):
    readings = iter([10.0, 10.02])
    monkeypatch.setattr(peers_main, "machine_seconds", lambda: next(readings))

    assert idle_cores(seconds=0.01) == pytest.approx(2.0)


def test_the_worker_counts_are_read_until_one_reaches_the_target(tmp_path):
    done = tmp_path / "done"
    assert finished_at(done, 100) is None
    done.write_text("100 10.5\n200 11.0\n")

    assert finished_at(done, 100) == 10.5
    assert finished_at(done, 200) == 11.0
    assert finished_at(done, 300) is None


def test_tasks_must_be_a_multiple_of_the_workers_report_step():
    assert parse_args(["--tasks", "400"]).tasks == 400
    for bad in (["--tasks", "450"], ["--tasks", "0"], ["--turns", "0"], ["--clients", "0"]):
        with pytest.raises(SystemExit):
            parse_args(bad)


def test_a_missing_package_is_a_one_line_reason_to_skip():
    with pytest.raises(Unavailable, match=r"no_such_queue_package is not installed"):
        require_module("no_such_queue_package")


@pytest.mark.parametrize("scheme", ["amqp://guest:guest@127.0.0.1:{}//", "redis://127.0.0.1:{}/0"])
def test_a_celery_broker_nobody_listens_on_is_skipped_with_one_line(tmp_path, scheme):
    pytest.importorskip("celery")
    pytest.importorskip("redis")
    port = free_port()
    peer = CeleryPeer("Celery", scheme.format(port), "yes", tmp_path)

    started, skipped = start_available([peer])

    assert started == []
    assert skipped == [f"Celery: skipped, nothing answers at 127.0.0.1:{port} (Connection refused)"]


def test_every_system_runs_at_the_first_client_count_it_is_given(tmp_path):
    args = parse_args(["--clients", "16", "4"])

    peers = every_peer(None, "postgresql://postgres@127.0.0.1/postgres", tmp_path, args, Meter())

    # Each drain is set beside pgbench at its row's client count: the peers at the first.
    assert [p.row.clients for p in peers] == [16, 16, 4, 4, 16, 16, 16]
    assert [p.row.system for p in peers[4:]] == [
        "Celery + RabbitMQ, threads 16",
        "Celery + Redis, threads 16",
        "Procrastinate, concurrency 16",
    ]


def test_a_postgresql_nobody_listens_on_skips_procrastinate_and_not_the_others(tmp_path):
    pytest.importorskip("procrastinate")
    port = free_port()
    dead = ProcrastinatePeer(f"postgresql://postgres@127.0.0.1:{port}/postgres", tmp_path)
    alive = Fine()

    started, skipped = start_available([dead, alive])

    assert started == [alive]
    assert skipped == [
        f"Procrastinate, concurrency 4: skipped, nothing answers at 127.0.0.1:{port} "
        "(Connection refused)"
    ]


class Fine:
    """A peer that starts."""

    row = Row("fine", 4, "yes")

    def start(self) -> None:
        """Start."""

    def stop(self) -> None:
        """Stop."""
