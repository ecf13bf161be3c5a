"""The Celery app of the peer bench: one no-op task, durable settings, loaded by its worker."""

from __future__ import annotations

import os

from celery import Celery

from bench.peers.finished import count_finished


def celery_app(broker_url: str, queue: str) -> Celery:
    """A Celery app on the broker whose tasks go to `queue`: late acks, persistent messages
    (on RabbitMQ in a durable queue, kombu's default), no results stored."""
    app = Celery("peers", broker=broker_url, set_as_current=False)
    app.conf.update(
        task_default_queue=queue,
        task_acks_late=True,
        task_default_delivery_mode="persistent",
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    app.task(name="peers.noop")(noop)
    return app


def noop() -> None:
    """Do nothing but be counted."""
    count_finished()


# What `celery -A bench.peers.celery_tasks worker` loads; the bench passes both by environment.
app = celery_app(
    os.environ.get("PEERS_BROKER_URL", "memory://"), os.environ.get("PEERS_QUEUE", "peers")
)
