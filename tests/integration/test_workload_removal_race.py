"""A removed workload admits nothing, even on a coordinator that has not reloaded yet."""

from __future__ import annotations

import threading

import psycopg
import pytest
from psycopg.rows import dict_row

from devstack.sample_csv import generate_csv
from repositories import tasks as task_rows
from repositories import workload_registry as workload_rows
from tests.integration.csv_worker import files_under, row_counts, upload
from tests.integration.manifests import WORKER, manifest

WORKLOADS = "/api/v1/workloads"


@pytest.fixture
def stale(rt, monkeypatch):
    """Keep the app serving the workloads it has now, as a coordinator that has not yet heard
    the table's NOTIFY does (its own reloads and its listener's read nothing)."""
    monkeypatch.setattr(rt.workloads, "load_latest", lambda read: None)
    return monkeypatch


def render(tasks: int = 1) -> dict:
    """A manifest job for the `render` workload."""
    return {**manifest(tasks), "workload": "render"}


def assert_unknown_workload(response, name: str) -> None:
    assert response.status_code == 422, response.get_json()
    error = response.get_json()["error"]
    assert error["code"] == "invalid_input"
    assert error["details"] == {"fields": {"workload": [f"unknown workload {name!r}"]}}


def admit_and_cancel(client, headers) -> None:
    """Admit a render job and cancel it: the workload has a queue bound, and may be removed."""
    job = client.post("/api/v1/jobs", json=render(), headers=headers["user"]).get_json()
    cancelled = client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=headers["user"])
    assert cancelled.status_code == 200


@pytest.mark.parametrize("admitted_before", [True, False], ids=["with_bound", "never_admitted"])
def test_a_coordinator_still_serving_a_removed_workload_refuses_its_jobs_and_writes_nothing(
    client, headers, db, rt, stale, admitted_before
):
    if admitted_before:
        admit_and_cancel(client, headers)
    assert client.delete(f"{WORKLOADS}/render", headers=headers["operator"]).status_code == 204
    assert rt.workloads.get("render") is not None
    before = row_counts(db)

    refused = client.post("/api/v1/jobs", json=render(2), headers=headers["user"])

    assert_unknown_workload(refused, "render")
    assert row_counts(db) == before
    assert db.execute("SELECT FROM queue_bounds WHERE workload = 'render'").fetchone() is None

    stale.undo()
    again = client.post(WORKLOADS, json={"name": "render"}, headers=headers["operator"])
    assert again.status_code == 201
    admitted = client.post("/api/v1/jobs", json=render(2), headers=headers["user"])
    assert admitted.status_code == 201, admitted.get_json()


def test_a_coordinator_still_serving_csv_stats_refuses_a_csv_job_once_it_is_removed(
    client, headers, db, stale, archive_dir
):
    # csv_stats is built in: no operator removes it, but nothing may admit past a removal.
    workload_rows.remove(db, "csv_stats", "test")
    before, archived = row_counts(db), files_under(archive_dir)

    refused = upload(client, headers["user"], generate_csv(40, seed=1), chunks=2)

    assert_unknown_workload(refused, "csv_stats")
    assert row_counts(db) == before
    assert files_under(archive_dir) == archived

    stale.undo()
    workload_rows.add(db, "csv_stats", removed_caps(db, "csv_stats"), "test")
    admitted = upload(client, headers["user"], generate_csv(40, seed=1), chunks=2)
    assert admitted.status_code == 201, admitted.get_json()


def removed_caps(db, name: str) -> dict:
    row = db.execute("SELECT * FROM workloads WHERE name = %s", (name,)).fetchone()
    return {c: row[c] for c in workload_rows.CAP_COLUMNS}


@pytest.mark.parametrize("admitted_before", [True, False], ids=["with_bound", "never_admitted"])
def test_an_admission_waits_for_a_removal_in_progress_and_is_then_refused(
    client, headers, db, stale, database_url, eventually, admitted_before
):
    if admitted_before:
        admit_and_cancel(client, headers)
    answers = []
    with psycopg.connect(database_url, row_factory=dict_row) as removal:
        # The removal's steps as services.workload_registry takes them, left uncommitted.
        assert workload_rows.get(removal, "render", for_update=True) is not None
        task_rows.hold_queue_bound(removal, "render")
        assert workload_rows.unfinished_jobs(removal, "render") == 0
        workload_rows.remove(removal, "render", "operator")

        def submit() -> None:
            answers.append(client.post("/api/v1/jobs", json=render(), headers=headers["user"]))

        admission = threading.Thread(target=submit, daemon=True)
        admission.start()
        assert eventually(1.0, lambda: waiting_on_a_lock(db) == 1)
        assert not answers
        removal.commit()
    admission.join(timeout=5)

    assert not admission.is_alive()
    assert_unknown_workload(answers[0], "render")
    unfinished = db.execute(
        "SELECT count(*) AS n FROM jobs WHERE workload = 'render' AND status = 'queued'"
    ).fetchone()
    assert unfinished["n"] == 0


def waiting_on_a_lock(db) -> int:
    """How many of the test database's other sessions wait for a lock."""
    row = db.execute(
        """
        SELECT count(*) AS n FROM pg_stat_activity
        WHERE datname = current_database() AND wait_event_type = 'Lock'
        """
    ).fetchone()
    return row["n"]


def test_a_coordinator_still_serving_a_removed_workload_refuses_to_retry_its_failed_job(
    submit, claim, task_call, client, headers, db, stale
):
    job = submit(manifest(1))
    [task] = claim()
    lease = {"worker_id": WORKER, "attempt": 1, "lease_token": task["lease_token"]}
    failure = {**lease, "error_code": "oom", "retryable": False}
    assert task_call(task["task_id"], "failure", failure).status_code == 200
    assert client.delete(f"{WORKLOADS}/echo", headers=headers["operator"]).status_code == 204
    before = row_counts(db)

    refused = client.post(f"/api/v1/jobs/{job['id']}/retry", headers=headers["user"])

    assert refused.status_code == 429
    assert refused.get_json()["error"]["code"] == "queue_full"
    assert row_counts(db) == before
    status = client.get(f"/api/v1/jobs/{job['id']}", headers=headers["user"]).get_json()
    assert status["status"] == "failed"
