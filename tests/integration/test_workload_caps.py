"""Caps per workload: csv_stats keeps the CSV platform's, manifest workloads get their own."""

from __future__ import annotations

import pytest

from tests.integration.manifests import WORKER, manifest


@pytest.fixture
def app_config(app_config):
    """Small manifest caps, so a test can reach them."""
    return {
        **app_config,
        "CHUNKWISE_MANIFEST_MAX_QUEUED_TASKS": "600",
        "CHUNKWISE_MANIFEST_MAX_TASKS_PER_JOB": "400",
    }


def test_a_manifest_job_may_be_larger_than_the_csv_queue(client, headers, db):
    response = client.post("/api/v1/jobs", json=manifest(300), headers=headers["user"])
    assert response.status_code == 201, response.get_json()
    assert db.execute("SELECT count(*) AS n FROM tasks").fetchone()["n"] == 300


def test_a_manifest_job_over_the_per_job_cap_is_422_and_stores_nothing(client, headers, db):
    response = client.post("/api/v1/jobs", json=manifest(401), headers=headers["user"])
    assert response.status_code == 422
    assert response.get_json()["error"]["details"]["fields"] == {
        "tasks": ["a job may have at most 400 tasks"]
    }
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def test_a_manifest_job_that_overflows_its_workloads_queue_is_429_and_stores_nothing(
    client, headers, db
):
    assert (
        client.post("/api/v1/jobs", json=manifest(400), headers=headers["user"]).status_code == 201
    )
    response = client.post("/api/v1/jobs", json=manifest(201), headers=headers["user"])
    assert response.status_code == 429
    assert response.headers["Retry-After"]
    assert response.get_json()["error"]["details"] == {
        "queued_chunks": 400,
        "requested_chunks": 201,
        "limit": 600,
    }
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 1


def test_one_workloads_queue_does_not_count_anothers(client, headers):
    # The echo queue holds 400 of its 600; render has a queue of its own.
    assert (
        client.post("/api/v1/jobs", json=manifest(400), headers=headers["user"]).status_code == 201
    )
    other = {**manifest(400), "workload": "render"}
    assert client.post("/api/v1/jobs", json=other, headers=headers["user"]).status_code == 201


def test_an_uncapped_workload_leases_a_whole_claims_capacity_at_once(submit, claim):
    submit(manifest(64))
    assert len(claim(WORKER, capacity=64)) == 64


def test_csv_stats_keeps_its_lease_caps(rt):
    caps = rt.workloads.of("csv_stats").caps
    assert (caps.max_leases_per_worker, caps.max_leases_total) == (2, 8)
    assert (caps.max_queued_tasks, caps.max_tasks_per_job) == (256, 64)
