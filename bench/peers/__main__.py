"""Drain no-op tasks through Chunkwise and its peers in alternating turns (make bench-peers).

python -m bench.peers [--tasks 4000] [--turns 3] [--clients 4 16] [--timeout 120]

Each turn runs, one after another on one machine: pgbench -N at the first client count,
Chunkwise at as many clients (capacity twice that, results batched), Celery on RabbitMQ
(durable queue, persistent messages, acks_late, --pool threads), Celery on Redis and
Procrastinate at that concurrency; then pgbench and Chunkwise at each further client count.
Beside each drain it prints the CPU the whole machine used per task and, for the systems on the
database server, the WAL it wrote per task and its CPU where it runs on this machine; beside
pgbench, the same per transaction: what a task costs the database, set against a transaction
of pgbench's.
Each drain is the time from a full queue's release to its last task's return: the tasks are
submitted while nothing consumes them (Chunkwise's clients not started, Celery's worker told to
cancel its consumer, Procrastinate's jobs deferred to a queue its worker does not read), then
released (the clients started, add_consumer, the jobs moved to the worker's queue with the
notification a deferral sends). The submission's own time is printed beside. Every figure is
also a ratio to its own turn's pgbench TPS at the same client
count, so a shared machine's drift moves both sides of a ratio alike. A peer whose package or
broker is missing is skipped with one line; the bench goes on without it.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench.cpu import Meter, Usage, machine_seconds
from bench.peers.celery_peer import CeleryPeer
from bench.peers.chunkwise import ChunkwisePeer
from bench.peers.figures import Drain, table, turn_line, usage_text
from bench.peers.finished import REPORT_EVERY
from bench.peers.peer import Peer, Unavailable, start_available
from bench.peers.procrastinate_peer import ProcrastinatePeer
from bench.queue import STACK_ENV, pgbench, scratch_database
from devstack.stack import LocalStack, database_url, stop_on_sigterm

# Tasks each peer runs before the first turn: its connections open, its code paths warm, and
# proof that its worker started (a warm-up that does not finish in WARM_UP_TIMEOUT skips it).
WARM_UP = 2 * REPORT_EVERY
WARM_UP_TIMEOUT = 60.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The bench's flags."""
    parser = argparse.ArgumentParser(prog="python -m bench.peers")
    parser.add_argument("--tasks", type=int, default=4000, help="no-op tasks per drain")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument(
        "--clients",
        type=int,
        nargs="+",
        default=[4, 16],
        help="pgbench clients and Chunkwise clients (capacity 2x); the peers run at the first",
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds one drain may take")
    parser.add_argument("--rabbitmq-url", default="amqp://guest:guest@127.0.0.1:5672//")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args(argv)
    if args.tasks <= 0 or args.tasks % REPORT_EVERY:
        parser.error(f"--tasks must be a positive multiple of {REPORT_EVERY}")
    if args.turns <= 0 or any(c <= 0 for c in args.clients):
        parser.error("--turns and --clients must be positive")
    return args


def main(argv: list[str] | None = None) -> None:
    """Start every system, drain each once a turn, print every turn and the table."""
    args = parse_args(argv)
    stop_on_sigterm()
    run_dir = Path(tempfile.mkdtemp(prefix="chunkwise-bench-peers-"))
    server = database_url(run_dir)
    print(
        f"{args.tasks:,} no-op tasks a drain, {args.turns} turns, clients {args.clients}; "
        "drain = a full queue's release to its last task's return"
    )
    with scratch_database(server) as chunkwise_url, scratch_database(server) as pgbench_url:
        pgbench(pgbench_url, "-i", "-q", "-s", "4")
        stack = LocalStack(
            database_url=chunkwise_url,
            run_dir=run_dir / "stack",
            env=STACK_ENV,
        )
        meter = Meter(server)
        peers = every_peer(stack, server, run_dir, args, meter)
        try:
            stack.prepare()
            stack.start_coordinator()
            started, skipped = start_available(peers)
            for line in skipped:
                print(line)
            ready = warm_up(started)
            pgbench_tps, pgbench_usage, drains = run_turns(ready, pgbench_url, args, meter)
        finally:
            for peer in peers:
                peer.stop()
            stack.stop()
            meter.close()
    shutil.rmtree(run_dir, ignore_errors=True)
    print()
    for line in table([p.row for p in ready], drains, pgbench_tps, pgbench_usage):
        print(line)


def every_peer(
    stack: LocalStack, server: str, run_dir: Path, args: argparse.Namespace, meter: Meter
) -> list[Peer]:
    """The systems in the order each turn runs them: Chunkwise at every client count, then the
    peers at the first. Those on the database server read its CPU and WAL; Celery, the
    machine's CPU."""
    concurrency = args.clients[0]
    return [
        *(
            ChunkwisePeer(stack, clients, 2 * clients, fetch, meter)
            for clients in args.clients
            for fetch in (False, True)
        ),
        CeleryPeer(
            f"Celery + RabbitMQ, threads {concurrency}",
            args.rabbitmq_url,
            "yes (durable queue, persistent messages, acks_late; no publisher confirms)",
            run_dir,
            concurrency,
        ),
        CeleryPeer(
            f"Celery + Redis, threads {concurrency}",
            args.redis_url,
            "unknown",
            run_dir,
            concurrency,
        ),
        ProcrastinatePeer(server, run_dir, concurrency, meter),
    ]


def warm_up(peers: list[Peer]) -> list[Peer]:
    """Drain WARM_UP tasks through each peer; return those that finished in time."""
    ready = []
    for peer in peers:
        try:
            drained = peer.drain(0, WARM_UP, WARM_UP_TIMEOUT)
        except Unavailable as exc:
            print(f"{peer.row.system}: skipped, {exc}")
            continue
        if drained.seconds is None:
            print(f"{peer.row.system}: skipped, its warm-up did not finish in {WARM_UP_TIMEOUT} s")
            continue
        ready.append(peer)
    return ready


def run_turns(
    peers: list[Peer], pgbench_url: str, args: argparse.Namespace, meter: Meter
) -> tuple[dict[tuple[int, int], float], dict[tuple[int, int], Usage], list[Drain]]:
    """Every turn: at each client count, pgbench -N then each peer at that count. Returns
    pgbench's TPS, its CPU microseconds and WAL bytes per transaction, and every drain."""
    pgbench_tps: dict[tuple[int, int], float] = {}
    pgbench_usage: dict[tuple[int, int], Usage] = {}
    drains: list[Drain] = []
    active = list(peers)
    for turn in range(1, args.turns + 1):
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"turn {turn}, load average {load}, {idle_cores():.2f} cores busy while idle")
        for clients in args.clients:
            transactions = math.ceil(args.tasks / clients)
            before = meter.read()
            tps, _ = pgbench(
                pgbench_url,
                *("-N", "-n", "-c", str(clients), "-j", str(min(2, clients))),
                *("-t", str(transactions)),
            )
            used = meter.read().since(before).per(transactions * clients)
            pgbench_tps[(turn, clients)] = tps
            pgbench_usage[(turn, clients)] = used
            print(
                f"turn {turn}  {f'pgbench -N -c {clients}':<34} {tps:8.0f} TPS  "
                + usage_text(used, "transaction")
            )
            for peer in [p for p in active if p.row.clients == clients]:
                try:
                    drained = peer.drain(turn, args.tasks, args.timeout)
                except Unavailable as exc:
                    print(f"{peer.row.system}: stopped, {exc}")
                    active.remove(peer)
                    continue
                drains.append(drained)
                print(turn_line(drained, tps))
                if drained.seconds is None:
                    print(f"{peer.row.system}: timed out after {args.timeout} s; no more turns")
                    active.remove(peer)
    return pgbench_tps, pgbench_usage, drains


def idle_cores(seconds: float = 1.0) -> float:
    """Cores the machine keeps busy while no drain runs (every peer's idle work, the servers'):
    a share of each drain's machine CPU that is not the drain's."""
    before = machine_seconds()
    time.sleep(seconds)
    return (machine_seconds() - before) / seconds


if __name__ == "__main__":
    main()
