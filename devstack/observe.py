"""Driving and watching the real stack (e2e tests, the reliability report): timings, jobs, logs."""

from __future__ import annotations

import json
import time

import requests
from prometheus_client.parser import text_string_to_metric_families

from devstack.sample_csv import HEADER, generate_csv
from devstack.stack import LocalStack
from services.csvstats import sequential_totals
from worker_cli.jobs import FINISHED

# Short timings keep the suite quick; the test of the default timings overrides them.
FAST = {
    "CHUNKWISE_LEASE_SECONDS": "4",
    "CHUNKWISE_HEARTBEAT_SECONDS": "1",
    "CHUNKWISE_MAINTENANCE_SECONDS": "0.5",
    "CHUNKWISE_LOG_LEVEL": "INFO",
}


def wait_for(predicate, timeout: float, interval: float = 0.1, what: str = "condition"):
    """Poll until predicate() is truthy; return its value or fail after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


# Workers long-poll for 1 s instead of 10, so a stopping stack is not kept waiting on them.
SHORT_POLL = ("--wait-seconds", "1")


def start_one_chunk_worker(stack: LocalStack, name: str, fault: str):
    """Start a worker that leases a single chunk, meets `fault` with it (--fault) and stops."""
    return stack.start_worker(
        name, *SHORT_POLL, "--capacity", "1", "--max-tasks", "1", "--fault", fault
    )


class Jobs:
    """The user's side of a running stack, checking what every run must keep true.

    wait() samples each job's progress while it runs and fails if it ever goes down; a job
    seen succeeded must hold exactly one accepted summary per chunk.
    """

    def __init__(self, stack: LocalStack, db):
        self.stack = stack
        self.db = db
        self.session = stack.api()

    def post(
        self, data: bytes, chunks: int, *, key: str | None = None, session=None
    ) -> requests.Response:
        """POST a CSV job over `session` (default: one kept-alive user session)."""
        headers = {"Idempotency-Key": key} if key is not None else {}
        return (session or self.session).post(
            f"{self.stack.url}/api/v1/jobs",
            files={"file": ("data.csv", data)},
            data={"column": "value", "chunks": str(chunks)},
            headers=headers,
            timeout=60,
        )

    def submit(self, data: bytes, chunks: int, *, key: str | None = None) -> dict:
        """Submit a CSV job that must be created; return it."""
        response = self.post(data, chunks, key=key)
        assert response.status_code == 201, response.text
        return response.json()

    def get(self, job_id: str) -> dict:
        """GET a job."""
        response = self.session.get(f"{self.stack.url}/api/v1/jobs/{job_id}", timeout=10)
        assert response.status_code == 200, response.text
        return response.json()

    def chunks(self, job_id: str) -> list[dict]:
        """GET a job's chunks in order."""
        response = self.session.get(f"{self.stack.url}/api/v1/jobs/{job_id}/chunks", timeout=10)
        assert response.status_code == 200, response.text
        return response.json()["chunks"]

    def chunk(self, job_id: str, chunk_id: str) -> dict:
        """GET one chunk, with what the list leaves out (its checkpoint, metrics, details)."""
        url = f"{self.stack.url}/api/v1/jobs/{job_id}/chunks/{chunk_id}"
        response = self.session.get(url, timeout=10)
        assert response.status_code == 200, response.text
        return response.json()

    def wait(self, job_id: str, *statuses: str, timeout: float) -> dict:
        """Poll until the job is in one of `statuses` (default: any final one); return it."""
        wanted = statuses or FINISHED
        progress: list[float] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                job = self.get(job_id)
            except requests.ConnectionError:
                job = None  # the coordinator is restarting; the job lives on in the database
            if job is not None:
                assert not progress or job["progress"] >= progress[-1], (
                    f"progress went down: {progress[-5:]} then {job['progress']}"
                )
                progress.append(job["progress"])
                if job["status"] in wanted:
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} not {wanted} after {timeout} s: {job}")
            time.sleep(0.1)
        if job["status"] == "succeeded":
            assert_one_summary_per_chunk(self.db, job)
        return job


def assert_one_summary_per_chunk(db, job: dict) -> None:
    """A succeeded job holds exactly one accepted summary for each of its chunks."""
    rows = db.execute(
        "SELECT chunk_index FROM chunk_summaries WHERE job_id = %s ORDER BY chunk_index",
        (job["id"],),
    ).fetchall()
    assert [r["chunk_index"] for r in rows] == list(range(job["chunks_total"]))


def totals_of(data: bytes) -> dict:
    """The sequential control result, shaped as the API's job result."""
    return sequential_totals(data, "value").to_dict()


def big_csv(records: int, seed: int = 5) -> bytes:
    """A large CSV quickly: one generated block of records repeated (ids repeat; no matter)."""
    block = 100_000
    repeats, rest = divmod(records, block)
    body = generate_csv(block, seed).split(b"\n", 1)[1]
    tail = generate_csv(rest, seed + 1).split(b"\n", 1)[1] if rest else b""
    return HEADER.encode() + body * repeats + tail


def log_lines(stack: LocalStack, name: str) -> list[dict]:
    """The JSON lines of one process's log (gunicorn's own plain lines are skipped)."""
    path = stack.logs / f"{name}.log"
    lines = []
    for raw in path.read_text(errors="replace").splitlines() if path.exists() else []:
        if raw.startswith("{"):
            try:
                lines.append(json.loads(raw))
            except json.JSONDecodeError:
                continue  # a line cut short by a SIGKILL
    return lines


def events(stack: LocalStack, name: str, *names: str) -> list[dict]:
    """One process's log lines whose `event` is one of `names`."""
    return [line for line in log_lines(stack, name) if line.get("event") in names]


class Scrape:
    """One /metrics answer, parsed."""

    def __init__(self, text: str):
        self.text = text
        self.samples = [
            s for family in text_string_to_metric_families(text) for s in family.samples
        ]

    def value(self, name: str, **labels: str) -> float:
        """Sum of the samples called `name` whose labels include `labels` (0 when none)."""
        return sum(
            s.value
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    def has(self, name: str, **labels: str) -> bool:
        """Whether any sample called `name` has these labels."""
        return any(
            s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
            for s in self.samples
        )


def scrape(stack: LocalStack) -> Scrape:
    """GET /metrics with the stack's scrape token, on a fresh connection."""
    return Scrape(stack.scrape())
