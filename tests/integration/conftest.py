"""Fixtures for the integration tests: jobs and worker calls over the real API."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from services import auth
from tests.integration.csv_worker import CsvWorker
from tests.integration.dashboard_forms import csrf_of
from tests.integration.manifests import WORKER, result_body


@pytest.fixture
def user(rt, tokens) -> auth.Principal:
    """The seeded compute_user as a principal, for calling services directly."""
    return auth.authenticate(rt.pool, tokens["user"])


@pytest.fixture
def operator(rt, tokens) -> auth.Principal:
    """The seeded operator as a principal, for calling services directly."""
    return auth.authenticate(rt.pool, tokens["operator"])


@pytest.fixture
def time_passes(db):
    """Move every waiting task's not_before into the past, as the clock would."""

    def elapse() -> None:
        db.execute("UPDATE tasks SET not_before = now() - interval '1 second'")

    return elapse


@pytest.fixture
def submit(client, headers) -> Callable[..., dict]:
    """POST a manifest job as the user (or `as_`) and return the created job."""

    def submit_job(body: dict, as_: str = "user") -> dict:
        response = client.post("/api/v1/jobs", json=body, headers=headers[as_])
        assert response.status_code == 201, response.get_json()
        return response.get_json()

    return submit_job


@pytest.fixture
def claim(client, headers) -> Callable[..., list[dict]]:
    """POST /api/v1/tasks/claim as a worker and return the leased tasks ([] on 204)."""

    def claim_tasks(worker_id: str = WORKER, capacity: int = 1, **extra: object) -> list[dict]:
        body = {"worker_id": worker_id, "workloads": ["echo"], "capacity": capacity, **extra}
        response = client.post("/api/v1/tasks/claim", json=body, headers=headers["worker"])
        assert response.status_code in (200, 204), response.get_json()
        return [] if response.status_code == 204 else response.get_json()["tasks"]

    return claim_tasks


@pytest.fixture
def task_call(client, headers) -> Callable[..., object]:
    """POST to /api/v1/tasks/{id}/{heartbeat|result|failure} as a worker; returns the response."""

    def call(task_id: str, action: str, body: dict):
        return client.post(
            f"/api/v1/tasks/{task_id}/{action}", json=body, headers=headers["worker"]
        )

    return call


@pytest.fixture
def complete(task_call) -> Callable[..., dict]:
    """Report a result for a claimed task and return the task as the API shows it."""

    def complete_task(claimed: dict, worker_id: str = WORKER) -> dict:
        response = task_call(claimed["task_id"], "result", result_body(claimed, worker_id))
        assert response.status_code == 200, response.get_json()
        return response.get_json()

    return complete_task


@pytest.fixture
def worker(client, headers) -> CsvWorker:
    """A fake csv_stats worker."""
    return CsvWorker(client, headers["worker"], "csv-a")


@pytest.fixture
def other_worker(client, headers) -> CsvWorker:
    """A second fake csv_stats worker under the same worker token."""
    return CsvWorker(client, headers["worker"], "csv-b")


@pytest.fixture
def task_row(db) -> Callable[[str], dict]:
    """The tasks row as PostgreSQL holds it."""

    def row(task_id: str) -> dict:
        return db.execute("SELECT * FROM tasks WHERE id = %s", (task_id,)).fetchone()

    return row


@pytest.fixture
def job_row(db) -> Callable[[str], dict]:
    """The jobs row as PostgreSQL holds it."""

    def row(job_id: str) -> dict:
        return db.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()

    return row


@pytest.fixture
def eventually() -> Callable[[float, Callable[[], bool]], bool]:
    """Whether a condition comes true within some seconds (what the listener hears, say)."""

    def within(seconds: float, condition: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if condition():
                return True
            time.sleep(0.01)
        return False

    return within


@pytest.fixture
def sign_in(app, tokens) -> Callable[[str], object]:
    """A fresh test client signed in as one of the seeded principals."""

    def signed_in(name: str):
        browser = app.test_client()
        form = browser.get("/ui/sign-in")
        answer = browser.post(
            "/ui/sign-in", data={"csrf_token": csrf_of(form), "token": tokens[name]}
        )
        assert answer.status_code == 303, answer.text
        return browser

    return signed_in
