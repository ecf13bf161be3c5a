"""What the CSV integration tests share: uploads, a fake csv_stats worker over HTTP, row counts.

Not a conftest: the test_csv_* modules import it explicitly, so nothing here is a fixture and
nothing here touches the other integration modules.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import pytest

from services import csvstats

WORKLOADS = ["csv_stats"]
TABLES = ("jobs", "tasks", "task_attempts", "chunk_summaries", "outbox", "audit_log")


def settings(**env: str):
    """Run the test against an app built with these extra settings (merged by app_config)."""
    return pytest.mark.parametrize("app_config", [env], indirect=True, ids=["settings"])


def upload(
    client,
    headers: dict,
    data: bytes,
    *,
    column: str | None = "value",
    chunks: int | str = 4,
    key: str | None = None,
    labels: tuple[str, ...] = (),
    **form: object,
):
    """POST a CSV job as multipart; `column=None` leaves the field out."""
    fields: dict[str, object] = {
        "file": (io.BytesIO(data), "data.csv"),
        "chunks": str(chunks),
        **{name: str(value) for name, value in form.items()},
    }
    if column is not None:
        fields["column"] = column
    if labels:
        fields["label"] = list(labels)
    sent = {**headers, **({"Idempotency-Key": key} if key is not None else {})}
    return client.post(
        "/api/v1/jobs", data=fields, headers=sent, content_type="multipart/form-data"
    )


def upload_body(
    client,
    headers: dict,
    data: bytes,
    *,
    column: str | None = "value",
    chunks: int | str = 4,
    key: str | None = None,
    labels: tuple[str, ...] = (),
    **query: object,
):
    """POST a CSV job as the text/csv body, its parameters in the query string."""
    params = [("chunks", str(chunks)), *((name, str(value)) for name, value in query.items())]
    if column is not None:
        params.append(("column", column))
    params += [("label", label) for label in labels]
    sent = {**headers, **({"Idempotency-Key": key} if key is not None else {})}
    return client.post(
        "/api/v1/jobs", data=data, query_string=params, headers=sent, content_type="text/csv"
    )


def submit(client, headers: dict, data: bytes, **options: object) -> dict:
    """Submit a CSV job that must be created, and return it."""
    response = upload(client, headers, data, **options)
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def get_job(client, headers: dict, job_id: str) -> dict:
    """GET a job that must be visible."""
    response = client.get(f"/api/v1/jobs/{job_id}", headers=headers)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def row_counts(db) -> dict[str, int]:
    """How many rows each table holds."""
    return {
        table: db.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"]  # noqa: S608
        for table in TABLES
    }


def files_under(directory: Path) -> list[Path]:
    """Every file below a directory (an archive or a spool directory)."""
    return sorted(p for p in directory.rglob("*") if p.is_file()) if directory.exists() else []


@dataclass
class CsvWorker:
    """A csv_stats worker speaking the real protocol through a Flask test client."""

    client: object
    headers: dict
    worker_id: str

    def claim(self, capacity: int = 1) -> list[dict]:
        """Lease up to `capacity` chunks; [] when the coordinator answers 204."""
        response = self.client.post(
            "/api/v1/tasks/claim",
            headers=self.headers,
            json={"worker_id": self.worker_id, "workloads": WORKLOADS, "capacity": capacity},
        )
        assert response.status_code in (200, 204), response.get_json()
        return [] if response.status_code == 204 else response.get_json()["tasks"]

    def claim_one(self) -> dict:
        """Lease exactly one chunk."""
        claimed = self.claim()
        assert len(claimed) == 1, claimed
        return claimed[0]

    def read_input(self, task: dict, attempt: int | None = None, *, buffered: bool = True):
        """GET the chunk's bytes under this worker's lease (or another attempt number);
        buffered=False to take them block by block, as the server sends them."""
        attempt = task["attempt"] if attempt is None else attempt
        return self.client.get(
            task["input_uri"],
            headers={**self.headers, "Chunkwise-Lease-Token": task["lease_token"]},
            query_string={"worker_id": self.worker_id, "attempt": attempt},
            buffered=buffered,
        )

    def read_bytes(self, task: dict) -> bytes:
        """The chunk's bytes, which this worker must be allowed to read."""
        response = self.read_input(task)
        assert response.status_code == 200, response.get_json()
        return response.get_data()

    def summarise(self, task: dict) -> csvstats.Summary:
        """Read the chunk and summarise its column, exactly as the real handler does."""
        p = task["parameters"]
        return csvstats.summarise(
            [self.read_bytes(task)],
            column_index=p["column_index"],
            column=p["column"],
            delimiter=p["delimiter"],
            record_start=p["record_start"],
            first_line=p["first_line"],
        )

    def call(self, task: dict, action: str, **body: object):
        """POST heartbeat, result or failure under this worker's id and the task's lease."""
        lease = {
            "attempt": task["attempt"],
            "lease_token": task["lease_token"],
        }
        body = {"worker_id": self.worker_id, **lease, **body}
        return self.client.post(
            f"/api/v1/tasks/{task['task_id']}/{action}", headers=self.headers, json=body
        )

    def report_result(self, task: dict, summary: dict | None = None, **body: object):
        """Report a chunk's summary (computed from its bytes unless given)."""
        if summary is None:
            summary = self.summarise(task).to_dict()
        return self.call(
            task, "result", summary=summary, metrics={"records": summary["records"]}, **body
        )

    def report_invalid_input(self, task: dict, summary: csvstats.Summary):
        """Report a chunk whose summary stopped at a bad record, as the real worker does."""
        return self.call(
            task,
            "failure",
            error_code="invalid_input",
            error_message=summary.error.message(),
            retryable=False,
            details={**summary.error.to_dict(), "summary": summary.to_dict()},
        )

    def report_unreadable(self, task: dict):
        """Report a transient failure to read the chunk's input."""
        return self.call(
            task,
            "failure",
            error_code="input_unavailable",
            error_message="connection reset while reading input",
            retryable=True,
            details={"status": 503},
        )

    def heartbeat(self, task: dict):
        """Renew the lease."""
        return self.call(task, "heartbeat")

    def run(self, task: dict):
        """Summarise a leased chunk and report it: a result, or invalid_input at a bad record."""
        summary = self.summarise(task)
        if summary.error is not None:
            return self.report_invalid_input(task, summary)
        return self.report_result(task, summary.to_dict())

    def drain(self, limit: int = 100) -> int:
        """Run chunks one at a time until none is claimable; return how many ran."""
        for ran in range(limit):
            claimed = self.claim()
            if not claimed:
                return ran
            response = self.run(claimed[0])
            assert response.status_code == 200, response.get_json()
        raise AssertionError(f"still claiming after {limit} chunks")
