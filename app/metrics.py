"""GET /metrics: HTTP metrics from the exporter, events from services.metrics, queue from SQL.

Under gunicorn (PROMETHEUS_MULTIPROC_DIR set) every process writes its counters to files the
MultiProcessCollector sums, and gunicorn.conf.py's child_exit marks dead processes. Queue
figures come from one aggregate query at scrape time, cached briefly, so they are right
whichever process answers; they are named chunkwise_cluster_*, the same on every host (to be
aggregated with max(), never sum()).

A scrape needs a credential (the series name live worker ids, which must not be public):
CHUNKWISE_METRICS_TOKEN as a bearer token, or any operator's API token.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import struct
import threading
import time

from flask import Flask, request
from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_flask_exporter import PrometheusMetrics
from prometheus_flask_exporter.multiprocess import GunicornInternalPrometheusMetrics

from app import auth
from services import jobs, metrics, queue
from services.errors import Unauthenticated
from services.runtime import Runtime

CACHE_SECONDS = 2.0
# A worker silent for this long is gone: its series is dropped instead of growing forever.
WORKER_SERIES_SECONDS = 15 * 60
# However many worker ids credentials invent, a scrape names at most this many (the most
# recently seen): a series per worker must not let one credential flood the time-series store.
MAX_WORKER_SERIES = 1000
PROGRESS_BUCKETS = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
FAILURE_CLASSES = {
    "invalid_input": "invalid_input",
    "input_unavailable": "transient_read",
    "lease_expired": "lost_worker",
    "timed_out": "timed_out",
}


class QueueCollector:
    """Queue, job, lease and worker figures read from PostgreSQL when scraped."""

    def __init__(self, runtime: Runtime):
        self._runtime = runtime
        self._lock = threading.Lock()
        self._cached: tuple[float, list] = (0.0, [])

    def collect(self):
        """Yield the families, from a snapshot at most CACHE_SECONDS old."""
        with self._lock:
            at, families = self._cached
            if time.monotonic() - at > CACHE_SECONDS:
                families = self._read()
                self._cached = (time.monotonic(), families)
        yield from families

    def _read(self) -> list:
        view = queue.queue_status(self._runtime)
        workers = [v.worker for v in queue.list_workers(self._runtime)]
        f = view.figures
        chunks = GaugeMetricFamily(
            "chunkwise_cluster_chunks",
            "Chunks by workload and state.",
            labels=["workload", "state"],
        )
        for c in f.chunks:
            chunks.add_metric([c.workload, c.state], c.count)
        jobs_family = GaugeMetricFamily(
            "chunkwise_cluster_jobs", "Jobs by status.", labels=["status"]
        )
        for status, n in sorted(f.jobs_by_status.items()):
            jobs_family.add_metric([status], n)
        waiting = GaugeMetricFamily(
            "chunkwise_cluster_waiting_chunks",
            "Pending chunks not yet claimable: waiting out a retry delay or a schedule.",
            labels=["workload"],
        )
        for workload, n in sorted(f.waiting_by_workload.items()):
            waiting.add_metric([workload], n)
        schedules = GaugeMetricFamily(
            "chunkwise_cluster_schedules",
            "Every user's schedules, active or paused.",
            labels=["state"],
        )
        schedules.add_metric(["active"], f.schedules.active)
        schedules.add_metric(["paused"], f.schedules.paused)
        paused = GaugeMetricFamily(
            "chunkwise_cluster_workload_paused",
            "1 while an operator has paused the workload's claims, else 0.",
            labels=["workload"],
        )
        paused_names = {p.workload for p in f.paused}
        for name in self._runtime.workloads.names():
            paused.add_metric([name], int(name in paused_names))
        families = [
            chunks,
            jobs_family,
            waiting,
            paused,
            schedules,
            _gauge(
                "chunkwise_cluster_failing_schedules",
                "Schedules whose last run submitted no job (a full queue, or refused).",
                f.schedules.failing,
            ),
            _gauge(
                "chunkwise_cluster_schedule_lag_seconds",
                "How late the most overdue scheduled run is (0 when none is due).",
                f.schedules.lag_seconds or 0.0,
            ),
            _gauge(
                "chunkwise_cluster_oldest_pending_chunk_age_seconds",
                "How long the longest-waiting claimable chunk has waited (0 when none).",
                f.oldest_pending_seconds or 0.0,
            ),
            _gauge(
                "chunkwise_cluster_active_leases", "Chunks leased to workers now.", f.active_leases
            ),
            _gauge(
                "chunkwise_cluster_max_leases_total",
                "The cap on active leases.",
                view.limits.max_leases_total,
            ),
            _gauge(
                "chunkwise_cluster_oldest_lease_age_seconds",
                "Age of the oldest active lease (0 when none).",
                f.oldest_lease_seconds or 0.0,
            ),
            _progress_histogram(f.unfinished_jobs),
            _counter(
                "chunkwise_cluster_lease_expiries",
                "Leases that expired without a result.",
                f.lease_expiries_total,
            ),
            _by_class(
                "chunkwise_cluster_retries",
                "Chunk attempts retried, by failure class.",
                f.retries_by_code,
            ),
            _by_class(
                "chunkwise_cluster_chunk_failures",
                "Chunks failed for good, by failure class.",
                f.failed_chunks_by_code,
            ),
        ]
        families.extend(_worker_families(workers))
        return families


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _by_class(name: str, doc: str, by_code: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=["failure_class"])
    totals: dict[str, int] = {}
    for code, n in by_code.items():
        cls = FAILURE_CLASSES.get(code, "other")
        totals[cls] = totals.get(cls, 0) + n
    for cls in ("invalid_input", "transient_read", "lost_worker", "timed_out", "other"):
        family.add_metric([cls], totals.get(cls, 0))
    return family


def _progress_histogram(unfinished) -> GaugeHistogramMetricFamily:
    # A histogram, not a series per job: its cardinality is fixed however many jobs run.
    values = [jobs.progress_of(j.status, j.chunks_completed, j.chunks_total) for j in unfinished]
    buckets = [(str(b), sum(1 for v in values if v <= b)) for b in PROGRESS_BUCKETS]
    buckets.append(("+Inf", len(values)))
    return GaugeHistogramMetricFamily(
        "chunkwise_cluster_unfinished_job_progress",
        "Progress of queued, running and merging jobs, as a histogram.",
        buckets=buckets,
        gsum_value=sum(values),
    )


def _worker_families(workers) -> list:
    heartbeat = GaugeMetricFamily(
        "chunkwise_cluster_worker_heartbeat_age_seconds",
        "Seconds since each worker was last heard from.",
        labels=["worker_id"],
    )
    rss = GaugeMetricFamily(
        "chunkwise_cluster_worker_peak_rss_bytes",
        "Peak resident memory each worker reported with its results.",
        labels=["worker_id"],
    )
    for w in workers[:MAX_WORKER_SERIES]:
        age = w.seen_seconds_ago
        if age > WORKER_SERIES_SECONDS:
            continue
        heartbeat.add_metric([w.id], age)
        if w.peak_rss_bytes is not None:
            rss.add_metric([w.id], w.peak_rss_bytes)
    return [heartbeat, rss]


def scrapers_only(scrape_token: str | None):
    """Decorate the /metrics view: the scrape token or an operator's token, else 401/403."""
    expected = hashlib.sha256(scrape_token.encode()).digest() if scrape_token else None

    def decorate(view):
        @functools.wraps(view)
        def guarded(*args, **kwargs):
            scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
            token = credentials.strip() if scheme.lower() == "bearer" else ""
            if not token:
                raise Unauthenticated(
                    "GET /metrics needs an Authorization: Bearer header with "
                    "CHUNKWISE_METRICS_TOKEN or an operator's token",
                    details={"header": "Authorization"},
                )
            # Digests of equal length, compared in constant time: no timing tells how much of
            # a guess was right, nor the token's length.
            if expected and hmac.compare_digest(hashlib.sha256(token.encode()).digest(), expected):
                return view(*args, **kwargs)
            auth.operators_only()
            return view(*args, **kwargs)

        return guarded

    return decorate


def init_app(app: Flask, runtime: Runtime, scrape_token: str | None) -> PrometheusMetrics:
    """Expose /metrics for this app to scrapers (multiprocess-aware under gunicorn)."""
    options = {
        "group_by": "url_rule",
        "defaults_prefix": "chunkwise",
        "excluded_paths": ["/metrics"],
        "metrics_decorator": scrapers_only(scrape_token),
    }
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return MultiprocessCoordinatorMetrics(app, QueueCollector(runtime), **options)
    registry = CollectorRegistry()
    for metric in metrics.ALL:
        registry.register(metric)
    registry.register(QueueCollector(runtime))
    return PrometheusMetrics(app, registry=registry, **options)


# Reads of the per-process files, to ride out one being created mid-scrape.
SCRAPE_TRIES = 5


class MultiprocessCoordinatorMetrics(GunicornInternalPrometheusMetrics):
    """The exporter's gunicorn mode, with the queue figures added to every scrape.

    In multiprocess mode the exporter builds a fresh registry per scrape and ignores the one
    it was given, so the queue collector has to join at that point.
    """

    def __init__(self, app: Flask, queue_collector: QueueCollector, **options):
        self._queue_collector = queue_collector
        super().__init__(app, **options)

    def generate_metrics(self, accept_header=None, names=None):
        """Summed per-process files plus this scrape's queue snapshot."""
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        registry.register(self._queue_collector)
        if names:
            registry = registry.restricted_registry(names)
        encode, content_type = choose_encoder(accept_header)
        for _ in range(SCRAPE_TRIES - 1):
            try:
                return encode(registry).decode("utf-8"), content_type
            except struct.error:
                # A process creating its metrics file leaves it empty for an instant before
                # sizing it; read again once it has.
                time.sleep(0.01)
        return encode(registry).decode("utf-8"), content_type
