"""Schemathesis over GET /api/v1/openapi.json: no input gets a 5xx, and every answer is documented.

Runs in-process against the real app and PostgreSQL, once per kind of token, with valid and
invalid data (schemathesis's positive and negative modes). Bounded by MAX_EXAMPLES per
operation so that it stays a few seconds of `make test`.
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app import create_app, openapi
from app.runtime import close
from services import credentials
from tests.conftest import fresh_database, url_for
from tests.integration.manifests import WORKER, manifest

MAX_EXAMPLES = int(os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "12"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
# A long poll is the one input that is slow by design; the rest of the body stays generated.
MAX_WAIT_SECONDS = 0.05


@pytest.fixture(scope="module")
def api(pg_server, template_db, tmp_path_factory):
    """One app and database for every operation and token, holding a job with a leased task."""
    tmp = tmp_path_factory.mktemp("schemathesis")
    with fresh_database(pg_server, template_db) as janitor:
        app = create_app(
            {
                "DATABASE_URL": url_for(pg_server, janitor.dbname),
                "CHUNKWISE_TEMP_DIR": str(tmp / "tmp"),
                "CHUNKWISE_ARCHIVE_DIR": str(tmp / "archive"),
                "CHUNKWISE_DB_POOL_MIN": "1",
                "CHUNKWISE_ALLOWED_WORKLOADS": "csv_stats,echo,render",
                "CHUNKWISE_LOG_LEVEL": "CRITICAL",
            }
        )
        pool = app.extensions["chunkwise.runtime"].pool
        issued = credentials.seed_local(
            pool, user_token=None, operator_token=None, worker_token=None
        )
        tokens = {t.name: t.token for t in issued}
        headers = {
            "user": {"Authorization": f"Bearer {tokens['compute_user']}"},
            "operator": {"Authorization": f"Bearer {tokens['operator']}"},
            "worker": {"Authorization": f"Bearer {tokens['local-worker']}"},
        }
        client = app.test_client()
        assert client.post("/api/v1/jobs", json=manifest(2), headers=headers["user"]).status_code
        claim = {"worker_id": WORKER, "workloads": ["echo"]}
        client.post("/api/v1/tasks/claim", json=claim, headers=headers["worker"])
        yield app, headers
        close(app.extensions["chunkwise.runtime"])


@pytest.fixture(scope="module", params=["user", "operator", "worker"])
def principal(request) -> str:
    """The kind of token the run calls with."""
    return request.param


@pytest.fixture(scope="module")
def api_schema(api, principal):
    """The app's own OpenAPI document, loaded as a client with this token reads it."""
    app, headers = api
    return schemathesis.openapi.from_wsgi("/api/v1/openapi.json", app, headers=headers[principal])


@pytest.fixture(scope="module")
def bearer(api, principal) -> dict:
    """The Authorization header of this run's token."""
    return api[1][principal]


@pytest.mark.parametrize("endpoint", sorted(openapi.DOCUMENTED))
def test_no_request_gets_a_5xx_or_an_undocumented_answer(endpoint, api_schema, bearer):
    operation = api_schema.find_operation_by_id(endpoint)
    cases = st.one_of(operation.as_strategy(mode) for mode in GenerationMode)

    @given(cases)
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def call_and_validate(case):
        _shorten_long_polls(case)
        case.call_and_validate(headers=bearer, checks=CHECKS)

    call_and_validate()


def _shorten_long_polls(case) -> None:
    for values in (case.body, case.query):
        if isinstance(values, dict) and isinstance(values.get("wait_seconds"), int | float):
            values["wait_seconds"] = min(values["wait_seconds"], MAX_WAIT_SECONDS)


def test_the_openapi_document_is_served_without_a_trace_id_in_the_body(api):
    app, headers = api

    response = app.test_client().get("/api/v1/openapi.json", headers=headers["user"])

    assert response.mimetype == "application/vnd.oai.openapi+json"
    assert "trace_id" not in response.get_json()
    assert len(response.headers["X-Trace-Id"]) == 32


def test_real_answers_on_real_resources_match_the_documented_schemas(api):
    """Random ids mostly meet 404s: here each success the API gives is checked on a real job."""
    app, headers = api
    document = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", app, headers=headers["user"])

    def call(endpoint: str, who: str, expect: int, **case) -> object:
        response = (
            document.find_operation_by_id(endpoint)
            .Case(**case)
            .call_and_validate(headers=headers[who], checks=CHECKS)
        )
        assert response.status_code == expect, (endpoint, response.text)
        return response.json() if response.content else None

    submit = {
        "body": manifest(2),
        "media_type": "application/json",
        "headers": {"Idempotency-Key": "k"},
    }
    job = call("jobs.create_job", "user", 201, **submit)
    again = call("jobs.create_job", "user", 200, **submit)
    assert again["id"] == job["id"]
    csv = {"column": "a", "chunks": 2, "label": ["team=x"], "file": b"a,b\n1,2\n3,4\n"}
    call("jobs.create_job", "user", 201, body=csv, media_type="multipart/form-data")
    ids = {"job_id": job["id"]}
    view = app.test_client().get(f"/api/v1/jobs/{job['id']}", headers=headers["user"])
    call("jobs.get_job", "user", 200, path_parameters=ids)
    call(
        "jobs.get_job",
        "user",
        304,
        path_parameters=ids,
        headers={"If-None-Match": view.headers["ETag"]},
    )
    call("jobs.list_jobs", "user", 200, query={"label": "team=x"})
    [chunk, _] = call("chunks.list_chunks", "user", 200, path_parameters=ids)["chunks"]
    call("chunks.get_chunk", "user", 200, path_parameters={**ids, "chunk_id": chunk["id"]})
    call("events.list_events", "user", 200)
    named = {"name": "nightly"}
    schedule = {"body": {"cron": "0 3 * * *", "job": manifest(1)}, "path_parameters": named}
    call("schedules.put_schedule", "user", 201, **schedule)
    call("schedules.put_schedule", "user", 200, **schedule)
    call("schedules.list_schedules", "user", 200)
    run = {"path_parameters": named, "headers": {"Idempotency-Key": "run"}}
    call("schedules.run_schedule", "user", 201, **run)
    call("schedules.run_schedule", "user", 200, **run)
    call("schedules.get_schedule", "user", 200, path_parameters=named)
    theirs = {"path_parameters": named, "query": {"owner": "compute_user"}}
    call("schedules.pause_schedule", "operator", 200, **theirs)
    call("schedules.resume_schedule", "operator", 200, **theirs)
    call("schedules.resume_schedule", "user", 200, path_parameters=named)
    call("schedules.delete_schedule", "user", 204, path_parameters=named)
    call("schedules.get_schedule", "user", 404, path_parameters=named)
    call("queue.queue_status", "operator", 200)
    call("queue.list_workers", "operator", 200)
    square = {"path_parameters": {"workload": "validator-square"}}
    added = {"name": "validator-square", "max_queued_tasks": 10, "max_tasks_per_job": 5}
    call("queue.add_workload", "operator", 201, body=added, media_type="application/json")
    call("queue.add_workload", "operator", 409, body=added, media_type="application/json")
    call("queue.get_workload", "operator", 200, **square)
    change = {"body": {"max_starts_per_second": 1.5}, "media_type": "application/json"}
    call("queue.change_workload", "operator", 200, **square, **change)
    call("queue.remove_workload", "operator", 204, **square)
    call("queue.remove_workload", "operator", 404, **square)
    call("queue.remove_workload", "operator", 409, path_parameters={"workload": "echo"})

    claim = {"worker_id": "validator", "workloads": ["echo"], "capacity": 2}
    leased = call("tasks.claim", "worker", 200, body=claim)["tasks"]
    task = {"task_id": leased[0]["task_id"]}
    query = {"worker_id": "validator", "attempt": leased[0]["attempt"]}
    token = leased[0]["lease_token"]
    lease = {**query, "lease_token": token}
    call("tasks.heartbeat", "worker", 200, path_parameters=task, body={**lease, "checkpoint": {}})
    call(
        "tasks.read_input",
        "worker",
        404,
        path_parameters=task,
        query=query,
        headers={"Chunkwise-Lease-Token": token},
    )  # echo: no stored input
    result = {**lease, "result_uri": "s3://out/0", "result_sha256": "0" * 64}
    call("tasks.result", "worker", 200, path_parameters=task, body=result)
    failure = {**lease, "error_code": "late", "retryable": False}
    call("tasks.failure", "worker", 409, path_parameters=task, body=failure)
    call("tasks.claim", "worker", 204, body={**claim, "workloads": ["render"], "capacity": 1})

    call("jobs.list_results", "user", 200, path_parameters=ids)
    call("jobs.retry_job", "user", 409, path_parameters=ids)
    call("jobs.cancel_job", "user", 200, path_parameters=ids)
