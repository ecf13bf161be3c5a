"""Chunkwise as a peer: the real stack of bench/queue.py, drained by claim-and-batch clients."""

from __future__ import annotations

import threading
import time

from bench.cpu import Meter, process_seconds
from bench.peers.figures import Drain, Row
from bench.queue import children, drain, noop_step, submit_noop_jobs
from devstack.stack import LocalStack

# A claim finding nothing long-polls this long: the last clients wait out one after the drain.
WAIT_SECONDS = 1


class ChunkwisePeer:
    """`clients` threads, each claiming up to `capacity` tasks and posting their results in one
    call: the protocol a worker speaks, without the worker's own threads. With `fetch`, each
    batch of results claims the next (POST /api/v1/tasks/results?claim=N); a plain claim
    only when that found none."""

    def __init__(self, stack: LocalStack, clients: int, capacity: int, fetch: bool, meter: Meter):
        how = "complete and fetch" if fetch else "batched results"
        self.row = Row(
            f"Chunkwise, {clients} clients x capacity {capacity}, {how}",
            clients,
            "yes, PostgreSQL",
        )
        self.stack = stack
        self.clients = clients
        self.capacity = capacity
        self.fetch = fetch
        self.meter = meter

    def start(self) -> None:
        """Open the clients' kept-alive sessions (the bench starts the coordinator)."""
        self.submitter = self.stack.api()
        self.sessions = [self.stack.api(self.stack.tokens.worker) for _ in range(self.clients)]
        for session in [self.submitter, *self.sessions]:
            session.get(f"{self.stack.url}/healthz", timeout=30).raise_for_status()

    def stop(self) -> None:
        """Nothing to stop: the bench stops the coordinator."""

    def drain(self, turn: int, tasks: int, timeout: float) -> Drain:
        """Submit one job of `tasks` no-op tasks, then start the clients; return once they have
        had every result accepted, with the CPU the coordinator, the machine and the database
        server used meanwhile."""
        accepted = [0]
        lock = threading.Lock()
        deadline = time.monotonic() + timeout
        finished = threading.Event()
        ended: list[float] = []

        def client(n: int) -> None:
            session = self.sessions[n]
            worker = f"peers-{n}"
            leased: list[dict] = []
            while not finished.is_set() and time.monotonic() < deadline:
                done, leased = noop_step(
                    self.stack,
                    session,
                    worker,
                    leased,
                    capacity=self.capacity,
                    fetch=self.fetch,
                    wait_seconds=WAIT_SECONDS,
                )
                with lock:
                    accepted[0] += done
                    if accepted[0] >= tasks and not finished.is_set():
                        ended.append(time.time())
                        finished.set()

        threads = [
            threading.Thread(target=client, args=(n,), daemon=True) for n in range(self.clients)
        ]
        submitting = time.time()
        submit_noop_jobs(self.stack, tasks, self.submitter)
        master = self.stack.processes["coordinator"].pid
        cpu_before = process_seconds([master, *children(master)])
        used_before = self.meter.read()
        started = time.time()
        for thread in threads:
            thread.start()
        finished.wait(max(0.0, deadline - time.monotonic()))
        cpu_after = process_seconds([master, *children(master)])
        used = self.meter.read().since(used_before)
        for thread in threads:
            thread.join()
        if not ended:
            drain(self.stack)
            return Drain(self.row.system, turn, tasks, None, submit_seconds=started - submitting)
        return Drain(
            self.row.system,
            turn,
            tasks,
            ended[0] - started,
            submit_seconds=started - submitting,
            cpu_us_per_task=(cpu_after - cpu_before) / tasks * 1e6,
            usage=used,
        )
