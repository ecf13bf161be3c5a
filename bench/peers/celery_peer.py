"""Celery as a peer: one worker process (--pool threads), fed by the bench over a broker."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench.cpu import Meter
from bench.peers.figures import Drain, Row
from bench.peers.finished import wait_finished
from bench.peers.peer import Unavailable, require_listening, require_module, spawn, stop_process


class CeleryPeer:
    """A Celery worker on RabbitMQ or Redis, on a queue of its own that is deleted at stop."""

    def __init__(
        self,
        system: str,
        broker_url: str,
        durable: str,
        run_dir: Path,
        concurrency: int = 4,
        meter: Meter | None = None,
    ):
        self.row = Row(system, concurrency, durable)
        self.meter = meter or Meter()
        self.broker_url = broker_url
        self.concurrency = concurrency
        self.queue = f"peers_bench_{uuid.uuid4().hex[:8]}"
        self.run_dir = run_dir
        self.done_file = run_dir / f"{self.queue}.done"
        self.app = None
        self.worker: subprocess.Popen | None = None
        self.finished = 0
        self.hostname = f"{self.queue}@{socket.gethostname()}"

    def start(self) -> None:
        """Check the packages and the broker, then start the worker."""
        require_module("celery")
        redis = self.broker_url.startswith("redis")
        require_module("redis" if redis else "amqp")
        require_listening(self.broker_url, 6379 if redis else 5672)
        if redis:
            self.row = Row(self.row.system, self.row.clients, redis_durability(self.broker_url))
        from bench.peers.celery_tasks import celery_app

        self.app = celery_app(self.broker_url, self.queue)
        self.worker = spawn(
            [
                *(sys.executable, "-m", "celery", "-A", "bench.peers.celery_tasks", "worker"),
                *("--pool", "threads", "--concurrency", str(self.concurrency)),
                *("--queues", self.queue, "--hostname", self.hostname),
                *("--without-gossip", "--without-mingle", "--without-heartbeat"),
                *("--loglevel", "WARNING"),
            ],
            {
                "PEERS_BROKER_URL": self.broker_url,
                "PEERS_QUEUE": self.queue,
                "PEERS_DONE_FILE": str(self.done_file),
            },
            self.run_dir / f"{self.queue}.log",
        )

    def drain(self, turn: int, tasks: int, timeout: float) -> Drain:
        """Publish `tasks` no-op messages one by one, as an application would, while the worker
        consumes nothing; then have it consume the queue, and wait until it has run them all."""
        if self.worker.poll() is not None:
            raise Unavailable(f"the Celery worker exited; see {self.run_dir}/{self.queue}.log")
        noop = self.app.tasks["peers.noop"]
        deadline = time.monotonic() + timeout
        # Before the first drain the worker may still be starting: it consumes on its own then.
        if self.finished:
            self.consume(self.app.control.cancel_consumer, deadline)
        submitting = time.time()
        for _ in range(tasks):
            noop.apply_async()
        used_before = self.meter.read()
        started = time.time()
        if self.finished:
            self.consume(self.app.control.add_consumer, deadline)
        self.finished += tasks
        done = wait_finished(self.done_file, self.finished, deadline)
        used = self.meter.read().since(used_before)
        seconds = None if done is None else done - started
        return Drain(
            self.row.system, turn, tasks, seconds, submit_seconds=started - submitting, usage=used
        )

    def consume(self, command, deadline: float) -> None:
        """Tell the worker to start or stop consuming the queue, and wait for its answer."""
        answer = command(
            self.queue,
            destination=[self.hostname],
            reply=True,
            timeout=max(1.0, deadline - time.monotonic()),
        )
        if not answer:
            raise Unavailable(
                f"the Celery worker {self.hostname} did not answer {command.__name__}"
            )

    def stop(self) -> None:
        """Stop the worker and delete the bench's queue from the broker."""
        stop_process(self.worker)
        if self.app is None:
            return
        try:
            with self.app.connection_for_write() as connection:
                delete_queue(connection.default_channel, self.queue)
        except Exception as exc:  # the bench's result stands; say what was left behind
            print(f"{self.row.system}: could not delete queue {self.queue}: {exc}")


def delete_queue(channel, queue: str) -> None:
    """Delete a queue Celery declared and the exchange of the same name it declared with it
    (on Redis, the binding sets kombu keeps for that exchange)."""
    channel.queue_delete(queue)
    channel.exchange_delete(queue)
    client = getattr(channel, "client", None)  # kombu's Redis channel
    if client is not None:
        client.delete(f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")


def redis_durability(url: str) -> str:
    """Whether this Redis keeps what it acknowledged across a crash, from its own settings."""
    import redis

    settings = redis.Redis.from_url(url, socket_timeout=5).config_get("appendonly")
    if settings.get("appendonly") == "yes":
        fsync = redis.Redis.from_url(url, socket_timeout=5).config_get("appendfsync")
        return f"up to a second lost (appendonly yes, appendfsync {fsync.get('appendfsync')})"
    return "no (Redis appendonly no: snapshots at most)"
