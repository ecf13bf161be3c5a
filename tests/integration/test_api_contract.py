"""The HTTP contract: statuses, error bodies, trace ids, validation and the OpenAPI document."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from services import tasks
from tests.integration.manifests import WORKER, manifest, result_body

HEX32 = re.compile(r"^[0-9a-f]{32}$")
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
MISSING = "6f1c1a1e-0000-4000-8000-000000000000"

# Every endpoint the issue names, as (method, OpenAPI path): written out, not read from the app.
ISSUE_ENDPOINTS = [
    ("post", "/api/v1/jobs"),
    ("get", "/api/v1/jobs"),
    ("get", "/api/v1/jobs/{job_id}"),
    ("get", "/api/v1/jobs/{job_id}/results"),
    ("post", "/api/v1/tasks/claim"),
    ("post", "/api/v1/tasks/{task_id}/heartbeat"),
    ("post", "/api/v1/tasks/{task_id}/result"),
    ("post", "/api/v1/tasks/{task_id}/failure"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/api/v1/openapi.json"),
]


def claim_body(**extra: object) -> dict:
    return {"worker_id": WORKER, "workloads": ["echo"], **extra}


# --- status codes -----------------------------------------------------------------------------


def test_a_claim_on_an_empty_queue_is_204_with_no_body(client, headers):
    response = client.post("/api/v1/tasks/claim", json=claim_body(), headers=headers["worker"])

    assert response.status_code == 204
    assert response.data == b""


def test_a_claim_returns_each_leased_task_with_its_lease(submit, client, headers):
    job = submit(manifest(1))

    response = client.post("/api/v1/tasks/claim", json=claim_body(), headers=headers["worker"])

    assert response.status_code == 200
    body = response.get_json()
    [task] = body["tasks"]
    assert (task["job_id"], task["chunk_index"], task["attempt"]) == (job["id"], 0, 1)
    assert task["workload"] == "echo" and task["input_uri"] == "s3://in/0"
    assert task["lease_expires_at"] and task["attempt_id"] and HEX32.match(task["trace_id"])
    assert task["heartbeat_seconds"] == body["heartbeat_seconds"] > 0


def test_a_call_under_a_stale_attempt_is_409_stale_attempt(rt, submit, claim, task_call):
    submit(manifest(1))
    [first] = claim(WORKER)
    tasks.expire_leases(rt, now=datetime.now(UTC) + timedelta(minutes=5))
    claim(WORKER)

    response = task_call(first["task_id"], "result", result_body(first))

    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "stale_attempt"


def test_a_job_creation_is_201_with_the_aggregate_status_and_an_etag(client, headers):
    response = client.post("/api/v1/jobs", json=manifest(2), headers=headers["user"])

    assert response.status_code == 201
    body = response.get_json()
    assert body["status"] == "queued" and body["chunks_total"] == 2
    etag = response.headers["ETag"]
    again = client.get(
        f"/api/v1/jobs/{body['id']}", headers={**headers["user"], "If-None-Match": etag}
    )
    assert (again.status_code, again.headers["ETag"]) == (304, etag)


def test_an_unknown_route_is_a_json_404(client, headers):
    response = client.get("/api/v1/nowhere", headers=headers["user"])

    assert response.status_code == 404
    assert response.get_json()["error"]["code"] == "not_found"


def test_a_wrong_method_is_a_json_405_that_says_which_methods_are_allowed(client, headers):
    response = client.delete("/api/v1/jobs", headers=headers["user"])

    assert response.status_code == 405
    assert response.get_json()["error"]["code"] == "method_not_allowed"
    assert {"GET", "POST"} <= {m.strip() for m in response.headers.get("Allow", "").split(",")}


# --- trace ids --------------------------------------------------------------------------------


@pytest.fixture
def calls(client, headers, submit, claim) -> dict[str, Callable[[], object]]:
    """One request of each kind of outcome the API has, by name."""
    job = submit(manifest(2))
    [leased] = claim(WORKER)
    tasks_path = f"/api/v1/tasks/{leased['task_id']}"
    return {
        "healthz 200": lambda: client.get("/healthz"),
        "readyz 200": lambda: client.get("/readyz"),
        "openapi 200": lambda: client.get("/api/v1/openapi.json", headers=headers["user"]),
        "job 201": lambda: client.post("/api/v1/jobs", json=manifest(1), headers=headers["user"]),
        "job 200": lambda: client.get(f"/api/v1/jobs/{job['id']}", headers=headers["user"]),
        "results 200": lambda: client.get(
            f"/api/v1/jobs/{job['id']}/results", headers=headers["user"]
        ),
        "events 200": lambda: client.get("/api/v1/events", headers=headers["user"]),
        "claim 200": lambda: client.post(
            "/api/v1/tasks/claim", json=claim_body(worker_id="z"), headers=headers["worker"]
        ),
        "claim 204": lambda: client.post(
            "/api/v1/tasks/claim", json=claim_body(workloads=["render"]), headers=headers["worker"]
        ),
        "heartbeat 200": lambda: client.post(
            f"{tasks_path}/heartbeat",
            headers=headers["worker"],
            json={"worker_id": WORKER, "attempt": 1, "lease_token": leased["lease_token"]},
        ),
        "heartbeat 409": lambda: client.post(
            f"{tasks_path}/heartbeat",
            headers=headers["worker"],
            json={"worker_id": "intruder", "attempt": 1, "lease_token": leased["lease_token"]},
        ),
        "unauthenticated 401": lambda: client.get("/api/v1/events"),
        "forbidden 403": lambda: client.get("/api/v1/events", headers=headers["worker"]),
        "missing 404": lambda: client.get(f"/api/v1/jobs/{MISSING}", headers=headers["user"]),
        "malformed 400": lambda: client.post(
            "/api/v1/jobs", data="{", headers=headers["user"], content_type="application/json"
        ),
        "invalid 422": lambda: client.post("/api/v1/jobs", json={}, headers=headers["user"]),
    }


def test_every_response_carries_x_trace_id_and_every_json_body_a_trace_id(calls):
    for name, call in calls.items():
        response = call()

        assert response.status_code == int(name.split()[-1]), name
        assert HEX32.match(response.headers.get("X-Trace-Id", "")), name
        if response.status_code == 204:
            assert response.data == b"", name
            continue
        if name == "openapi 200":
            # A clean OpenAPI document, of its own media type: the header alone carries the id.
            assert "trace_id" not in response.get_json(), name
            continue
        body = response.get_json()
        assert isinstance(body, dict), name
        assert HEX32.match(body.get("trace_id", "")), name
        if response.status_code >= 400:
            # An error's trace id is the request's: the one to look up in the logs.
            assert body["trace_id"] == response.headers["X-Trace-Id"], name


def test_an_incoming_traceparent_is_honoured_on_every_response(calls, client):
    client.environ_base["HTTP_TRACEPARENT"] = TRACEPARENT

    for name, call in calls.items():
        response = call()

        assert response.headers["X-Trace-Id"] == TRACE_ID, name
        if response.status_code >= 400:
            assert response.get_json()["trace_id"] == TRACE_ID, name


def test_a_job_created_under_a_traceparent_keeps_its_trace_id(client, headers, db):
    response = client.post(
        "/api/v1/jobs", json=manifest(1), headers={**headers["user"], "traceparent": TRACEPARENT}
    )

    assert response.get_json()["trace_id"] == TRACE_ID
    assert db.execute("SELECT trace_id FROM jobs").fetchone()["trace_id"] == TRACE_ID
    assert db.execute("SELECT trace_id FROM outbox").fetchone()["trace_id"] == TRACE_ID


def test_an_invalid_traceparent_gets_a_fresh_trace_id(client):
    for traceparent in [
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        f"00-{TRACE_ID}-0000000000000000-01",
        f"ff-{TRACE_ID}-00f067aa0ba902b7-01",
        f"00-{TRACE_ID}-00f067aa0ba902b7-01-more",
        f"00-{TRACE_ID.upper()}-00f067aa0ba902b7-01",
        "garbage",
        f"00-{TRACE_ID}-short-01",
    ]:
        response = client.get("/healthz", headers={"traceparent": traceparent})

        trace_id = response.headers["X-Trace-Id"]
        assert HEX32.match(trace_id), traceparent
        assert trace_id not in (TRACE_ID, "0" * 32), traceparent


def test_a_later_traceparent_version_is_honoured_and_its_extra_fields_ignored(client):
    header = f"01-{TRACE_ID}-00f067aa0ba902b7-01-what-comes-later"

    response = client.get("/healthz", headers={"traceparent": header})

    assert response.headers["X-Trace-Id"] == TRACE_ID


def test_each_request_gets_its_own_trace_id(client):
    seen = {client.get("/healthz").headers["X-Trace-Id"] for _ in range(5)}

    assert len(seen) == 5


# --- request validation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "who"), [("/api/v1/jobs", "user"), ("/api/v1/tasks/claim", "worker")]
)
def test_a_body_that_is_not_a_json_object_is_400_with_an_error_body(path, who, client, headers, db):
    for data in ["{not json", "[1, 2]", '"a string"', ""]:
        response = client.post(
            path, data=data, content_type="application/json", headers=headers[who]
        )

        assert response.status_code == 400, data
        body = response.get_json()
        assert body["error"]["code"] == "malformed_request", data
        assert body["error"]["message"], data
        assert HEX32.match(body["trace_id"]), data
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def test_a_job_with_several_bad_fields_is_422_naming_each_of_them(client, headers, db):
    body = manifest(2, priority=300)
    body["tasks"][1]["input_sha256"] = "not-hex"
    del body["workload"]

    response = client.post("/api/v1/jobs", json=body, headers=headers["user"])

    assert response.status_code == 422
    error = response.get_json()["error"]
    assert error["code"] == "invalid_input"
    fields = error["details"]["fields"]
    assert set(fields) == {"priority", "tasks", "workload"}
    assert set(fields["tasks"]) == {"1"}
    assert set(fields["tasks"]["1"]) == {"input_sha256"}
    for name in ("priority", "tasks", "workload"):
        assert name in error["message"]
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


ONE_BAD_JOB_FIELD = [
    ({"priority": 300}, "priority"),
    ({"priority": -1}, "priority"),
    ({"tasks": None}, "tasks"),  # None: leave the field out
    ({"tasks": []}, "tasks"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"workload": "no_such_workload"}, "workload"),
    ({"workload": "csv_stats"}, "workload"),
    ({"labels": {"k": 5}}, "labels"),
]


def test_a_job_with_one_bad_field_is_422_naming_that_field(client, headers, db):
    for change, field in ONE_BAD_JOB_FIELD:
        body = {k: v for k, v in {**manifest(1), **change}.items() if v is not None}

        response = client.post("/api/v1/jobs", json=body, headers=headers["user"])

        assert response.status_code == 422, change
        assert list(response.get_json()["error"]["details"]["fields"]) == [field], change
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def test_a_task_whose_input_sha256_is_not_64_lowercase_hex_is_422(client, headers):
    for sha in ["a" * 63, "A" * 64, "g" * 64, "a" * 65, "", "a" * 64 + "\n"]:
        body = manifest(1)
        body["tasks"][0]["input_sha256"] = sha

        response = client.post("/api/v1/jobs", json=body, headers=headers["user"])

        assert response.status_code == 422, sha
        assert response.get_json()["error"]["details"]["fields"] == {
            "tasks": {"0": {"input_sha256": ["must be 64 lowercase hex digits"]}}
        }, sha


ONE_BAD_CLAIM_FIELD = [
    ({"workloads": ["nonexistent"]}, "workloads"),
    ({"workloads": []}, "workloads"),
    ({"capacity": 0}, "capacity"),
    ({"wait_seconds": 31}, "wait_seconds"),
    ({"worker_id": ""}, "worker_id"),
]


def test_a_bad_claim_is_422_naming_the_field(client, headers):
    for change, field in ONE_BAD_CLAIM_FIELD:
        response = client.post(
            "/api/v1/tasks/claim", json=claim_body(**change), headers=headers["worker"]
        )

        assert response.status_code == 422, change
        assert list(response.get_json()["error"]["details"]["fields"]) == [field], change


# --- the OpenAPI document ---------------------------------------------------------------------


def test_the_openapi_document_needs_a_token(client):
    assert client.get("/api/v1/openapi.json").status_code == 401


def test_the_openapi_document_lists_every_endpoint_of_the_issue(client, headers):
    response = client.get("/api/v1/openapi.json", headers=headers["user"])

    assert response.status_code == 200
    document = response.get_json()
    assert document["openapi"].startswith("3.")
    missing = [
        (method, path)
        for method, path in ISSUE_ENDPOINTS
        if method not in document["paths"].get(path, {})
    ]
    assert missing == []


def patterns_in(node: object) -> list[str]:
    """Every `pattern` a part of the OpenAPI document declares."""
    if isinstance(node, dict):
        found = [v for k, v in node.items() if k == "pattern" and isinstance(v, str)]
        return found + [p for v in node.values() for p in patterns_in(v)]
    if isinstance(node, list):
        return [p for v in node for p in patterns_in(v)]
    return []


def test_the_documented_label_pattern_is_ecma_and_refuses_what_the_api_refuses(client, headers):
    document = client.get("/api/v1/openapi.json", headers=headers["user"]).get_json()
    (label,) = [
        p["schema"]["pattern"]
        for p in document["paths"]["/api/v1/jobs"]["get"]["parameters"]
        if p["name"] == "label"
    ]
    # ECMA-262's "$" (no m flag) matches only at the very end, as Python's "\Z" does; its
    # "\Z" is no anchor at all but a literal Z.
    as_python = re.compile(label.removesuffix("$") + r"\Z")

    assert not [p for p in patterns_in(document) if "\\Z" in p]
    for text in ["team=a", " team = a ", "k=", "team=x\n", " =x", "=x", "nokey", "a\rb=c"]:
        answer = client.get("/api/v1/jobs", query_string={"label": text}, headers=headers["user"])
        assert (as_python.match(text) is not None) == (answer.status_code == 200), text


def test_the_openapi_document_declares_201_for_a_created_job(client, headers):
    paths = client.get("/api/v1/openapi.json", headers=headers["user"]).get_json()["paths"]

    assert "201" in paths["/api/v1/jobs"]["post"]["responses"]


def test_the_openapi_document_describes_bodies_and_bearer_auth(client, headers):
    paths = client.get("/api/v1/openapi.json", headers=headers["user"]).get_json()["paths"]

    create = paths["/api/v1/jobs"]["post"]
    assert "requestBody" in create
    assert {"401", "422"} <= set(create["responses"])
    assert paths["/api/v1/tasks/claim"]["post"]["security"] == [{"bearer": []}]
    assert "204" in paths["/api/v1/tasks/claim"]["post"]["responses"]
    assert "security" not in paths["/healthz"]["get"]
    assert {
        "name": "job_id",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "format": "uuid"},
    } in paths["/api/v1/jobs/{job_id}"]["get"]["parameters"]


def test_the_openapi_document_describes_complete_and_claim(client, headers):
    document = client.get("/api/v1/openapi.json", headers=headers["user"]).get_json()

    results = document["paths"]["/api/v1/tasks/results"]["post"]
    [claim] = [p for p in results["parameters"] if p["name"] == "claim"]
    assert claim["in"] == "query"
    assert (claim["schema"]["minimum"], claim["schema"]["maximum"]) == (1, 1000)
    body = document["components"]["schemas"]["ResultBatch"]["properties"]
    assert body["workloads"]["type"] == "array"
    answer = document["components"]["schemas"]["ResultBatchResponse"]["properties"]
    assert {"results", "tasks", "heartbeat_seconds", "max_result_bytes", "claim_error"} <= set(
        answer
    )


def test_every_field_of_every_schema_in_the_openapi_document_has_a_type(client, headers):
    document = client.get("/api/v1/openapi.json", headers=headers["user"]).get_json()

    untyped = [
        f"{name}.{field}"
        for name, schema in document["components"]["schemas"].items()
        for field, spec in schema.get("properties", {}).items()
        if not {"type", "$ref", "allOf", "oneOf", "anyOf"} & set(spec)
    ]

    assert untyped == []


def test_the_openapi_document_names_each_error_an_operation_can_answer(client, headers):
    paths = client.get("/api/v1/openapi.json", headers=headers["user"]).get_json()["paths"]

    create = paths["/api/v1/jobs"]["post"]["responses"]
    assert {"200", "201", "400", "401", "403", "409", "413", "422", "429", "503"} <= set(create)
    assert create["429"]["headers"]["Retry-After"] == {"$ref": "#/components/headers/RetryAfter"}
    assert create["201"]["headers"]["ETag"] == {"$ref": "#/components/headers/ETag"}
    assert {"204", "400", "413"} <= set(paths["/api/v1/tasks/claim"]["post"]["responses"])
    assert "304" in paths["/api/v1/jobs/{job_id}"]["get"]["responses"]
    assert "503" in paths["/readyz"]["get"]["responses"]
    # gunicorn's own answer to a request line past its limit, before the app: no trace id.
    assert create["414"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"
    }
    for path, operations in paths.items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if status != "414":
                    assert "X-Trace-Id" in response["headers"], (method, path, status)
