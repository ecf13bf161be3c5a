"""Counters and histograms observed where things happen (merged across gunicorn processes).

Queue figures are not here: /metrics reads them from PostgreSQL at scrape time, so they are
right whichever process answers and after restarts. These are events one process saw.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# registry=None: app/metrics.py decides where they are exported from (a per-app registry in
# one process; the multiprocess files under PROMETHEUS_MULTIPROC_DIR under gunicorn).
ADMISSION_REJECTIONS = Counter(
    "chunkwise_admission_rejections_total",
    "Jobs refused with 429: past a queue cap, or past a user's share (user_quota_exceeded).",
    registry=None,
)
FENCED_WRITES = Counter(
    "chunkwise_fenced_writes_rejected_total",
    "Worker calls refused with 409 because the caller does not hold the current lease.",
    ["endpoint", "code"],
    registry=None,
)
MERGES = Counter(
    "chunkwise_merges_total",
    "Merges run, by outcome (succeeded, sum_overflow, ...).",
    ["outcome"],
    registry=None,
)
MERGE_SECONDS = Histogram(
    "chunkwise_merge_duration_seconds",
    "Time to lock, check and merge a job's summaries.",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
    registry=None,
)
COORDINATOR_PEAK_RSS = Gauge(
    "chunkwise_coordinator_peak_rss_bytes",
    "Peak resident memory of the coordinator processes (the largest one).",
    multiprocess_mode="max",
    registry=None,
)
WAITING_REQUESTS = Gauge(
    "chunkwise_waiting_requests",
    "Long polls (claims, job watches) waiting now, out of CHUNKWISE_MAX_WAITING_REQUESTS each.",
    multiprocess_mode="livesum",
    registry=None,
)
REFUSED_WAITS = Counter(
    "chunkwise_refused_waits_total",
    "Long polls answered at once, with Retry-After, because every waiting place was taken.",
    registry=None,
)

ALL = (
    ADMISSION_REJECTIONS,
    FENCED_WRITES,
    MERGES,
    MERGE_SECONDS,
    COORDINATOR_PEAK_RSS,
    WAITING_REQUESTS,
    REFUSED_WAITS,
)
