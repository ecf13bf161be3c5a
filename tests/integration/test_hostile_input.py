"""Hostile input gets a clear 4xx naming what is wrong, on every endpoint that takes input.

Each class of input PostgreSQL cannot take (NUL, unpaired surrogates, integers wider than their
column, JSON too deep or too large) is tried on every place it can arrive: JSON bodies (named
fields and free-form objects alike), CSV form fields, query parameters and headers.
"""

from __future__ import annotations

import copy
import io
import json
import re
import secrets
import uuid

import pytest
from marshmallow import ValidationError
from werkzeug.datastructures import MultiDict

from app import input_rules
from app.schemas import jobs as job_schemas
from tests.integration.dashboard_forms import csrf_of
from tests.integration.manifests import WORKER, manifest

NUL = "a\x00b"
SURROGATES = ["a\ud800b", "a\udc80b"]
INT32_MAX = 2**31 - 1


@pytest.fixture
def leased(submit, claim) -> dict:
    """A task leased to WORKER under attempt 1."""
    submit(manifest(1))
    [task] = claim(WORKER)
    return task


# Well formed, so a refusal names only the field a case breaks.
LEASE_TOKEN = "cwl_" + "0" * 64


def lease(**extra: object) -> dict:
    return {"worker_id": WORKER, "attempt": 1, "lease_token": LEASE_TOKEN, **extra}


def failure(**extra: object) -> dict:
    return lease(error_code="boom", error_message="it broke", retryable=True, details={}, **extra)


def batch() -> dict:
    item = {"task_id": "6f1c1a1e-0000-4000-8000-000000000000", "attempt": 1, "metrics": {}}
    item["lease_token"] = LEASE_TOKEN
    return {"worker_id": WORKER, "results": [item]}


def heartbeats() -> dict:
    item = {"task_id": "6f1c1a1e-0000-4000-8000-000000000000", "attempt": 1, "checkpoint": {}}
    item["lease_token"] = LEASE_TOKEN
    return {"worker_id": WORKER, "heartbeats": [item]}


def claim_request(**extra: object) -> dict:
    return {"worker_id": WORKER, "workloads": ["echo"], **extra}


JOB = manifest(1, labels={"team": "x"})

# (endpoint, method, path, principal, body); {task} is the leased task's id.
JSON_ENDPOINTS = {
    "create job": ("post", "/api/v1/jobs", "user", manifest(1, labels={"team": "x"})),
    "claim": ("post", "/api/v1/tasks/claim", "worker", claim_request()),
    "heartbeat": ("post", "/api/v1/tasks/{task}/heartbeat", "worker", lease(checkpoint={})),
    "result": ("post", "/api/v1/tasks/{task}/result", "worker", lease(metrics={})),
    "failure": ("post", "/api/v1/tasks/{task}/failure", "worker", failure()),
    "results": ("post", "/api/v1/tasks/results", "worker", batch()),
    "heartbeats": ("post", "/api/v1/tasks/heartbeats", "worker", heartbeats()),
    "put schedule": ("put", "/api/v1/schedules/nightly", "user", {"cron": "@daily", "job": JOB}),
}

# Every string a JSON body can carry, named fields and free-form values: (endpoint, path).
JSON_STRINGS = [
    ("create job", ("workload",)),
    ("create job", ("input_uri",)),
    ("create job", ("parameters", "k")),
    ("create job", ("parameters", "nested", "list", 0)),
    ("create job", ("labels", "team")),
    ("create job", ("tasks", 0, "input_uri")),
    ("create job", ("tasks", 0, "input_sha256")),
    ("create job", ("tasks", 0, "parameters", "k")),
    ("create job", ("depends_on", 0)),
    ("claim", ("worker_id",)),
    ("claim", ("workloads", 0)),
    ("heartbeat", ("worker_id",)),
    ("heartbeat", ("checkpoint", "position")),
    ("result", ("worker_id",)),
    ("result", ("result_uri",)),
    ("result", ("result_sha256",)),
    ("result", ("metrics", "note")),
    ("result", ("summary", "column")),
    ("failure", ("worker_id",)),
    ("failure", ("error_code",)),
    ("failure", ("error_message",)),
    ("failure", ("details", "reason")),
    ("results", ("worker_id",)),
    ("results", ("results", 0, "result_uri")),
    ("results", ("results", 0, "summary", "column")),
    ("results", ("results", 0, "metrics", "note")),
    ("heartbeats", ("worker_id",)),
    ("heartbeats", ("heartbeats", 0, "checkpoint", "position")),
    ("put schedule", ("cron",)),
    ("put schedule", ("timezone",)),
    ("put schedule", ("job", "workload")),
    ("put schedule", ("job", "parameters", "k")),
    ("put schedule", ("job", "labels", "team")),
    ("put schedule", ("job", "tasks", 0, "input_uri")),
    ("put schedule", ("job", "tasks", 0, "parameters", "k")),
]

# Every free-form object of a JSON body, whose keys are strings too: (endpoint, path).
JSON_OBJECTS = [
    ("create job", ()),
    ("create job", ("parameters",)),
    ("create job", ("labels",)),
    ("create job", ("tasks", 0, "parameters")),
    ("claim", ()),
    ("heartbeat", ("checkpoint",)),
    ("result", ("metrics",)),
    ("failure", ("details",)),
    ("results", ("results", 0, "metrics")),
    ("heartbeats", ("heartbeats", 0, "checkpoint")),
    ("put schedule", ()),
    ("put schedule", ("job",)),
    ("put schedule", ("job", "parameters")),
    ("put schedule", ("job", "labels")),
    ("put schedule", ("job", "tasks", 0, "parameters")),
]

# Integers one past what their column holds (or what the field allows): (endpoint, path, value).
JSON_INTEGERS = [
    ("create job", ("tasks", 0, "chunk_index"), 2**40),
    ("create job", ("tasks", 0, "chunk_index"), INT32_MAX + 1),
    ("create job", ("priority",), 2**15),
    ("create job", ("max_attempts",), 2**63),
    ("create job", ("timeout_seconds",), 2**31),
    ("claim", ("capacity",), 2**31),
    ("heartbeat", ("attempt",), INT32_MAX + 1),
    ("result", ("attempt",), 2**64),
    ("failure", ("attempt",), -(2**31) - 1),
    ("results", ("results", 0, "attempt"), 2**31),
    ("heartbeats", ("heartbeats", 0, "attempt"), 2**31),
    ("put schedule", ("job", "priority"), 2**15),
    ("put schedule", ("job", "timeout_seconds"), 2**63),
    ("put schedule", ("job", "tasks", 0, "chunk_index"), 2**40),
]


def with_value(body: dict, path: tuple, value: object) -> dict:
    """A copy of body with value at path, creating the objects on the way."""
    body = copy.deepcopy(body)
    here = body
    for step, after in zip(path, path[1:], strict=False):
        if isinstance(here, list):
            while len(here) <= step:
                here.append(None)
        if isinstance(here, dict) and not isinstance(here.get(step), dict | list):
            here[step] = [] if isinstance(after, int) else {}
        here = here[step]
    if isinstance(here, list):
        here[path[-1] :] = [value]
    else:
        here[path[-1]] = value
    return body


def error_at(fields: dict, path: tuple) -> list:
    """The messages that details.fields holds at path (list indexes come back as strings)."""
    for step in path:
        fields = fields[str(step)]
    return fields


def post_json(client, headers, endpoint: str, task_id: str, body: object, **kwargs):
    method, path, who, _ = JSON_ENDPOINTS[endpoint]
    return client.open(
        path.format(task=task_id),
        method=method.upper(),
        data=body if isinstance(body, str | bytes) else json.dumps(body),
        content_type="application/json",
        headers={**headers[who], **kwargs.pop("extra_headers", {})},
        **kwargs,
    )


def assert_invalid_input(response, path: tuple) -> list:
    assert response.status_code == 422, response.get_json()
    body = response.get_json()
    assert body["error"]["code"] == "invalid_input"
    assert str(path[0]) in body["error"]["message"]
    assert body["trace_id"] == response.headers["X-Trace-Id"]
    return error_at(body["error"]["details"]["fields"], path)


def label(endpoint: str, path: tuple) -> str:
    return f"{endpoint}:{'.'.join(map(str, path)) or '(body)'}"


# --- NUL and unpaired surrogates in JSON bodies -----------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "path"), JSON_STRINGS, ids=[label(*case) for case in JSON_STRINGS]
)
def test_a_json_string_postgresql_cannot_store_is_422_naming_its_field(
    endpoint, path, client, headers, leased, db
):
    for bad, expected in [(NUL, "NUL"), (SURROGATES[0], "surrogate"), (SURROGATES[1], "surr")]:
        body = with_value(JSON_ENDPOINTS[endpoint][3], path, bad)

        response = post_json(client, headers, endpoint, leased["task_id"], body)

        [message] = assert_invalid_input(response, path)
        assert expected in message, ascii(bad)
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 1  # the leased one's
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 1  # the leased one's


@pytest.mark.parametrize(
    ("endpoint", "path"), JSON_OBJECTS, ids=[label(*case) for case in JSON_OBJECTS]
)
def test_a_json_key_postgresql_cannot_store_is_422_naming_it_as_json_spells_it(
    endpoint, path, client, headers, leased
):
    for bad in (NUL, SURROGATES[0]):
        body = with_value(JSON_ENDPOINTS[endpoint][3], (*path, bad), "v")

        response = post_json(client, headers, endpoint, leased["task_id"], body)

        escaped = json.dumps(bad)[1:-1]
        [message] = assert_invalid_input(response, (*path, escaped))
    assert message.startswith("a key must not contain")


def test_a_surrogate_pair_is_one_character_and_is_stored(client, headers):
    body = manifest(1, parameters={"emoji": "\U0001f600"})

    response = client.post(
        "/api/v1/jobs",
        data=json.dumps(body),  # ensure_ascii: the pair travels as \ud83d\ude00
        content_type="application/json",
        headers=headers["user"],
    )

    assert response.status_code == 201
    assert response.get_json()["parameters"] == {"emoji": "\U0001f600"}


# --- integers past their column ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "path", "value"), JSON_INTEGERS, ids=[label(*c[:2]) for c in JSON_INTEGERS]
)
def test_an_integer_past_its_column_is_422_naming_the_field(
    endpoint, path, value, client, headers, leased
):
    body = with_value(JSON_ENDPOINTS[endpoint][3], path, value)

    response = post_json(client, headers, endpoint, leased["task_id"], body)

    [message] = assert_invalid_input(response, path)
    assert "less than or equal to" in message or "greater than or equal to" in message


@pytest.mark.parametrize("value", [1.5, 2.000001, -0.5])
@pytest.mark.parametrize(
    ("endpoint", "path"),
    [c[:2] for c in JSON_INTEGERS[1:]],
    ids=[label(*c[:2]) for c in JSON_INTEGERS[1:]],
)
def test_a_number_with_a_fraction_for_an_integer_is_422_naming_the_field(
    endpoint, path, value, client, headers, leased
):
    body = with_value(JSON_ENDPOINTS[endpoint][3], path, value)

    response = post_json(client, headers, endpoint, leased["task_id"], body)

    assert assert_invalid_input(response, path) == ["Not a valid integer."]


@pytest.mark.parametrize("value", ["yes", "true", 1, 0, None])
def test_retryable_that_is_not_true_or_false_is_422_naming_it(value, client, headers, leased):
    body = {**failure(), "retryable": value}

    response = post_json(client, headers, "failure", leased["task_id"], body)

    assert_invalid_input(response, ("retryable",))


WORKER_ID_PATHS = [
    ("claim", ("worker_id",)),
    ("heartbeat", ("worker_id",)),
    ("result", ("worker_id",)),
    ("failure", ("worker_id",)),
    ("results", ("worker_id",)),
    ("heartbeats", ("worker_id",)),
]


@pytest.mark.parametrize("value", [" ", "\u007f\u0001", "\u2028x", "a\nb"])
@pytest.mark.parametrize(
    ("endpoint", "path"), WORKER_ID_PATHS, ids=[label(*c) for c in WORKER_ID_PATHS]
)
def test_a_worker_id_that_is_not_printable_is_422_naming_it(
    endpoint, path, value, client, headers, leased
):
    body = with_value(JSON_ENDPOINTS[endpoint][3], path, value)

    response = post_json(client, headers, endpoint, leased["task_id"], body)

    assert assert_invalid_input(response, path) == ["must be printable characters, not only spaces"]


PEAK_RSS_PATHS = [
    ("result", ("metrics", "peak_rss_bytes")),
    ("results", ("results", 0, "metrics", "peak_rss_bytes")),
]


@pytest.mark.parametrize("value", [True, "1024", 1.5, [1], {"a": 1}, -1, 2**63, 2**70])
@pytest.mark.parametrize(
    ("endpoint", "path"), PEAK_RSS_PATHS, ids=[label(*c) for c in PEAK_RSS_PATHS]
)
def test_a_peak_rss_that_is_no_byte_count_is_422_naming_it(
    endpoint, path, value, client, headers, leased, task_row
):
    body = with_value(JSON_ENDPOINTS[endpoint][3], path, value)
    if endpoint == "results":  # the leased task: only the figure stands in the way
        body["results"][0]["task_id"] = leased["task_id"]

    response = post_json(client, headers, endpoint, leased["task_id"], body)

    [message] = assert_invalid_input(response, path)
    assert "whole number" in message
    assert task_row(leased["task_id"])["status"] == "leased"


def test_the_largest_chunk_index_an_integer_column_holds_is_accepted(client, headers, db):
    response = client.post("/api/v1/jobs", json=manifest([INT32_MAX]), headers=headers["user"])

    assert response.status_code == 201
    assert db.execute("SELECT chunk_index FROM tasks").fetchone()["chunk_index"] == INT32_MAX


# --- JSON too deep, too large, or not numbers PostgreSQL's JSON has ---------------------------


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("endpoint", list(JSON_ENDPOINTS))
def test_json_nested_past_the_limit_is_400_before_decoding(endpoint, client, headers, leased):
    for depth in (input_rules.MAX_JSON_DEPTH + 1, 100_000):
        body = '{"parameters": ' + nested(depth - 1) + "}"

        response = post_json(client, headers, endpoint, leased["task_id"], body)

        assert response.status_code == 400, depth
        error = response.get_json()["error"]
        assert error["code"] == "malformed_request"
        assert str(input_rules.MAX_JSON_DEPTH) in error["message"]


def test_json_nested_to_the_limit_is_accepted(client, headers):
    body = manifest(1)
    body["parameters"] = {"deep": json.loads(nested(input_rules.MAX_JSON_DEPTH - 2))}
    # brackets inside strings do not count
    body["tasks"][0]["parameters"] = {"text": "[[[[" * 100 + '\\"{'}

    response = client.post("/api/v1/jobs", json=body, headers=headers["user"])

    assert response.status_code == 201, response.get_json()


@pytest.mark.parametrize("endpoint", list(JSON_ENDPOINTS))
def test_a_json_body_past_the_size_limit_is_413(endpoint, client, headers, leased):
    body = with_value(JSON_ENDPOINTS[endpoint][3], ("padding",), "x" * input_rules.MAX_JSON_BYTES)

    response = post_json(client, headers, endpoint, leased["task_id"], body)

    assert response.status_code == 413
    assert response.get_json()["error"]["code"] == "payload_too_large"


def test_a_chunked_json_body_past_the_size_limit_is_413(client, headers):
    body = json.dumps(with_value(manifest(1), ("padding",), "x" * input_rules.MAX_JSON_BYTES))

    response = client.post(
        "/api/v1/jobs",
        input_stream=io.BytesIO(body.encode()),
        content_type="application/json",
        headers={**headers["user"], "Transfer-Encoding": "chunked"},
        environ_overrides={"wsgi.input_terminated": True},  # as gunicorn says of chunked bodies
    )

    assert response.status_code == 413


@pytest.mark.parametrize("endpoint", list(JSON_ENDPOINTS))
def test_a_json_number_postgresql_cannot_store_is_400(endpoint, client, headers, leased):
    for number in ("NaN", "Infinity", "-Infinity", "1e400"):
        body = json.dumps(JSON_ENDPOINTS[endpoint][3])[:-1] + f', "x": {number}}}'

        response = post_json(client, headers, endpoint, leased["task_id"], body)

        assert response.status_code == 400, number
        assert response.get_json()["error"]["code"] == "malformed_request"


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", None])
@pytest.mark.parametrize("endpoint", list(JSON_ENDPOINTS))
def test_a_body_that_is_not_json_is_415(endpoint, content_type, client, headers, leased):
    method, path, who, body = JSON_ENDPOINTS[endpoint]

    response = client.open(
        path.format(task=leased["task_id"]),
        method=method.upper(),
        data=json.dumps(body),
        headers={**headers[who], **({"Content-Type": content_type} if content_type else {})},
    )

    assert response.status_code == 415
    assert response.get_json()["error"]["code"] == "unsupported_media_type"


@pytest.mark.parametrize("endpoint", list(JSON_ENDPOINTS))
def test_a_json_body_that_is_not_utf8_is_400(endpoint, client, headers, leased):
    # \xed\xa0\x80 is a surrogate spelt in bytes: not UTF-8 at all.
    body = b'{"worker_id": "a\xed\xa0\x80b"}'

    response = post_json(client, headers, endpoint, leased["task_id"], body)

    assert response.status_code == 400
    assert response.get_json()["error"]["message"] == "the request body must be UTF-8"


# --- CSV form fields --------------------------------------------------------------------------


def csv_form(**fields: object) -> dict:
    return {"file": (io.BytesIO(b"a,b\n1,2\n"), "data.csv"), "column": "a", **fields}


@pytest.mark.parametrize(
    ("field", "value", "expect"),
    [
        ("column", NUL, "NUL"),
        ("delimiter", "\x00", "NUL"),
        ("label", f"team={NUL}", "NUL"),
        ("label", "t\x00m=x", "NUL"),
        ("label", "team=x\n", "key=value"),
        ("label", "te\ram=x", "key=value"),
        ("label", "  =x", "key=value"),
        ("chunks", str(2**40), "less than"),
        ("priority", str(2**15), "less than"),
    ],
)
def test_a_bad_csv_form_field_is_422_naming_it(field, value, expect, client, headers, db):
    response = client.post(
        "/api/v1/jobs",
        data=csv_form(**{field: value}),
        content_type="multipart/form-data",
        headers=headers["user"],
    )

    messages = assert_invalid_input(response, (field,))
    assert expect in json.dumps(messages)
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


@pytest.mark.parametrize(
    "form",
    [
        MultiDict([*csv_form().items(), *(("label", f"k{i}=v") for i in range(1000))]),
        csv_form(column="c" * 600_000),
    ],
    ids=["1,002 parts", "a 600 kB field"],
)
def test_a_form_over_werkzeugs_limits_is_413_saying_what_they_are(form, client, headers, db):
    response = client.post(
        "/api/v1/jobs", data=form, content_type="multipart/form-data", headers=headers["user"]
    )

    assert response.status_code == 413
    error = response.get_json()["error"]
    assert error["code"] == "payload_too_large"
    assert "at most 1000 parts, each field but the file at most 500000 bytes" in error["message"]
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


WHOLE_FORM = (
    b'--XB\r\nContent-Disposition: form-data; name="column"\r\n\r\na\r\n'
    b'--XB\r\nContent-Disposition: form-data; name="file"; filename="data.csv"\r\n'
    b"Content-Type: text/csv\r\n\r\na,b\n1,2\n\r\n--XB--\r\n"
)


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (WHOLE_FORM[: -len(b"\r\n--XB--\r\n")], "multipart/form-data; boundary=XB"),
        (WHOLE_FORM[: -len(b"--\r\n")], "multipart/form-data; boundary=XB"),
        (WHOLE_FORM[:40], "multipart/form-data; boundary=XB"),
        (WHOLE_FORM, "multipart/form-data; boundary=OTHER"),
    ],
    ids=["no-closing-boundary", "boundary-without-close", "cut-in-a-header", "other-boundary"],
)
def test_a_form_cut_short_or_malformed_is_400_and_leaves_no_spool(
    body, content_type, client, headers, db, temp_dir
):
    response = client.post(
        "/api/v1/jobs", data=body, content_type=content_type, headers=headers["user"]
    )

    assert response.status_code == 400, response.get_json()
    error = response.get_json()["error"]
    assert error["code"] == "malformed_request"
    assert error["message"].startswith("the form is cut short or malformed")
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0
    assert not temp_dir.exists() or list(temp_dir.iterdir()) == []


def test_a_whole_form_written_by_hand_is_admitted(client, headers):
    response = client.post(
        "/api/v1/jobs",
        data=WHOLE_FORM,
        content_type="multipart/form-data; boundary=XB",
        headers=headers["user"],
    )

    assert response.status_code == 201, response.get_json()


def test_the_form_schema_refuses_a_surrogate_the_http_parser_would_have_replaced():
    # werkzeug decodes form fields with errors="replace", so no surrogate arrives over HTTP
    # today; the rule lives in the schema all the same.
    with pytest.raises(ValidationError) as refused:
        job_schemas.CsvJobFormSchema().load({"column": SURROGATES[0]})

    assert refused.value.messages == {"column": ["must not contain an unpaired surrogate"]}


# --- path parameters --------------------------------------------------------------------------


def test_a_path_id_that_is_not_a_uuid_is_422_naming_it_on_every_route(app, client, headers):
    checked, wrong = [], {}
    for rule in app.url_map.iter_rules():
        for name in re.findall(r"<uuid:(\w+)>", rule.rule):
            path = re.sub(
                r"<uuid:(\w+)>",
                lambda m, n=name: "not-a-uuid" if m[1] == n else str(uuid.uuid4()),
                rule.rule,
            )
            method = sorted(rule.methods - {"HEAD", "OPTIONS"})[0]
            who = "worker" if rule.rule.startswith("/api/v1/tasks") else "user"
            answer = client.open(path, method=method, json={}, headers=headers[who])
            checked.append(path)
            if rule.rule.startswith("/ui/"):  # the dashboard's page for a 422
                named = f"{name}: must be a UUID" in answer.get_data(as_text=True)
            else:
                error = (answer.get_json(silent=True) or {}).get("error") or {}
                named = error.get("details") == {"fields": {name: ["must be a UUID"]}}
            if answer.status_code != 422 or not named:
                wrong[f"{method} {path}"] = (answer.status_code, answer.data[:200])

    assert wrong == {}
    assert len(checked) >= 15  # every id of the API's and the dashboard's routes


# --- query parameters -------------------------------------------------------------------------

# (principal, path, parameter, value, expected message fragment); {job}/{task}: real ids.
QUERY_CASES = [
    ("user", "/api/v1/jobs", "status", NUL, "NUL"),
    ("user", "/api/v1/jobs", "cursor", NUL, "NUL"),
    ("user", "/api/v1/jobs", "label", f"team={NUL}", "NUL"),
    ("user", "/api/v1/jobs", "label", "t\x00m=x", "NUL"),
    # One line: a trailing newline once slipped past the pattern's "$".
    ("user", "/api/v1/jobs", "label", "team=x\n", "key=value"),
    ("user", "/api/v1/jobs", "label", "team=x\r\ny", "key=value"),
    # A key of nothing but spaces, which trimming would leave empty.
    ("user", "/api/v1/jobs", "label", " =x", "key=value"),
    ("user", "/api/v1/jobs", "owner", NUL, "NUL"),
    ("user", "/api/v1/jobs", "workload", NUL, "NUL"),
    ("user", "/api/v1/jobs", "workload", "w" * 101, "Length"),
    ("user", "/api/v1/jobs", "limit", str(2**40), "less than"),
    ("user", "/api/v1/jobs", "depends_on", NUL, "NUL"),
    ("user", "/api/v1/jobs", "depends_on", "not-a-job", "Not a valid UUID"),
    ("user", "/api/v1/jobs/{job}", "wait_seconds", NUL, "NUL"),
    ("user", "/api/v1/jobs/{job}/chunks", "after", NUL, "NUL"),
    ("user", "/api/v1/jobs/{job}/chunks", "after", str(2**40), "less than"),
    ("user", "/api/v1/jobs/{job}/results", "limit", NUL, "NUL"),
    ("user", "/api/v1/jobs/{job}/results", "limit", "1.5", "integer"),
    ("user", "/api/v1/events", "after", str(2**63), "less than"),
    ("user", "/api/v1/events", "after", NUL, "NUL"),
    ("user", "/api/v1/events", "limit", str(2**40), "less than"),
    ("worker", "/api/v1/tasks/{task}/input", "worker_id", NUL, "NUL"),
    ("worker", "/api/v1/tasks/{task}/input", "attempt", str(INT32_MAX + 1), "less than"),
    ("operator", "/api/v1/schedules/nightly", "owner", NUL, "NUL"),
    ("operator", "/api/v1/schedules/nightly", "owner", "", "Length"),
    ("operator", "/api/v1/schedules/nightly", "owner", "o" * 201, "Length"),
]


@pytest.mark.parametrize(
    ("who", "path", "name", "value", "expect"),
    QUERY_CASES,
    ids=[f"{c[1]}?{c[2]}" for c in QUERY_CASES],
)
def test_a_bad_query_parameter_is_422_naming_it(
    who, path, name, value, expect, client, headers, leased
):
    params = {"worker_id": WORKER, "attempt": "1"} if "input" in path else {}
    url = path.format(job=leased["job_id"], task=leased["task_id"])

    response = client.get(url, query_string={**params, name: value}, headers=headers[who])

    messages = assert_invalid_input(response, (name,))
    assert expect in json.dumps(messages)


# (principal, path, parameter, two values) for every single-valued query parameter.
REPEATED_QUERY_CASES = [
    ("user", "/api/v1/jobs", "status", ["queued", "bogus"]),
    ("user", "/api/v1/jobs", "label", ["team=red", "team=blue"]),
    ("user", "/api/v1/jobs", "limit", ["1", "abc"]),
    ("user", "/api/v1/jobs", "cursor", ["a", "b"]),
    ("user", "/api/v1/jobs/{job}", "wait_seconds", ["0", "1"]),
    ("user", "/api/v1/jobs/{job}/chunks", "after", ["0", "1"]),
    ("user", "/api/v1/jobs/{job}/results", "limit", ["1", "2"]),
    ("user", "/api/v1/events", "after", ["0", "1"]),
    ("user", "/api/v1/events", "limit", ["1", "2"]),
    ("worker", "/api/v1/tasks/{task}/input", "worker_id", [WORKER, "other"]),
    ("worker", "/api/v1/tasks/{task}/input", "attempt", ["1", "2"]),
    ("operator", "/api/v1/schedules/nightly", "owner", ["compute_user", "other_user"]),
]


@pytest.mark.parametrize(
    ("who", "path", "name", "values"),
    REPEATED_QUERY_CASES,
    ids=[f"{c[1]}?{c[2]}" for c in REPEATED_QUERY_CASES],
)
def test_a_single_valued_query_parameter_given_twice_is_422_naming_it(
    who, path, name, values, client, headers, leased
):
    others = [("worker_id", WORKER), ("attempt", "1")] if "input" in path else []
    url = path.format(job=leased["job_id"], task=leased["task_id"])
    query = [(k, v) for k, v in others if k != name] + [(name, v) for v in values]

    response = client.get(url, query_string=query, headers=headers[who])

    assert assert_invalid_input(response, (name,)) == ["give this parameter once"]


@pytest.mark.parametrize("field", ["column", "chunks", "delimiter"])
def test_a_csv_form_field_given_twice_is_422_naming_it_and_writes_nothing(
    field, client, headers, db
):
    value = {"column": "a", "chunks": "2", "delimiter": ","}[field]
    form = [(field, value), (field, value)]
    if field != "column":
        form.append(("column", "a"))
    form.append(("file", (io.BytesIO(b"a,b\n1,2\n"), "data.csv")))

    response = client.post(
        "/api/v1/jobs",
        data=MultiDict(form),
        content_type="multipart/form-data",
        headers=headers["user"],
    )

    assert assert_invalid_input(response, (field,)) == ["give this parameter once"]
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def test_a_csv_query_parameter_given_twice_is_422_naming_it(client, headers):
    response = client.post(
        "/api/v1/jobs",
        query_string=[("column", "a"), ("column", "b")],
        data=b"a,b\n1,2\n",
        content_type="text/csv",
        headers=headers["user"],
    )

    assert assert_invalid_input(response, ("column",)) == ["give this parameter once"]


def test_a_csv_label_key_given_twice_is_422_naming_the_repeat_and_writes_nothing(
    client, headers, db
):
    labels = [("label", "team=a"), ("label", "run=1"), ("label", "team=b")]
    form = MultiDict([*csv_form().items(), *labels])

    in_form = client.post(
        "/api/v1/jobs", data=form, content_type="multipart/form-data", headers=headers["user"]
    )
    in_query = client.post(
        "/api/v1/jobs",
        query_string=[("column", "a"), *labels],
        data=b"a,b\n1,2\n",
        content_type="text/csv",
        headers=headers["user"],
    )

    for response in (in_form, in_query):
        assert assert_invalid_input(response, ("label", "2")) == ["the key 'team' is given twice"]
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def test_a_label_filter_on_a_legal_value_still_finds_the_job(submit, client, headers):
    job = submit(manifest(1, labels={"team": "a=b é"}))

    response = client.get(
        "/api/v1/jobs", query_string={"label": "team=a=b é"}, headers=headers["user"]
    )

    assert [j["id"] for j in response.get_json()["jobs"]] == [job["id"]]


# --- headers ----------------------------------------------------------------------------------


@pytest.fixture(params=["/api/v1/jobs", "/api/v1/schedules/nightly/run"])
def keyed_post(request, client, headers):
    """Every POST that takes an Idempotency-Key, as a call taking that header's value."""
    path, body = request.param, manifest(1)
    if "schedules" in path:
        client.put(
            "/api/v1/schedules/nightly",
            json={"cron": "@daily", "job": body},
            headers=headers["user"],
        )
        body = None
    return lambda key: client.post(
        path, json=body, headers={**headers["user"], "Idempotency-Key": key}
    )


def test_an_idempotency_key_with_a_nul_is_422_naming_the_header(keyed_post, db):
    response = keyed_post(NUL)

    [message] = assert_invalid_input(response, ("Idempotency-Key",))
    assert "NUL" in message
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def test_an_overlong_idempotency_key_is_422_naming_the_header(keyed_post, db):
    response = keyed_post("k" * 201)

    assert_invalid_input(response, ("Idempotency-Key",))
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


@pytest.mark.parametrize(
    ("who", "method", "path"),
    [
        (None, "GET", "/healthz"),
        ("user", "GET", "/api/v1/jobs"),
        ("user", "POST", "/api/v1/jobs"),
        ("worker", "POST", "/api/v1/tasks/claim"),
    ],
)
def test_a_traceparent_with_a_nul_is_422_naming_the_header(who, method, path, client, headers):
    response = client.open(
        path,
        method=method,
        json=manifest(1) if path == "/api/v1/jobs" else claim_request(),
        headers={**(headers[who] if who else {}), "traceparent": f"00-{NUL}-01"},
    )

    [message] = assert_invalid_input(response, ("traceparent",))
    assert "NUL" in message


# --- the backstop -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "value"),
    [
        ("SELECT %s::integer", 2**40),
        ("SELECT %s::text", NUL),
        ("SELECT %s::text", SURROGATES[0]),
        ("SELECT %s::jsonb", '{"a": "\\u0000"}'),
        # Random, so compression cannot bring it under a btree row's 2,704 bytes.
        ("INSERT INTO keyed VALUES (%s)", secrets.token_urlsafe(6000)),
    ],
    ids=["integer out of range", "nul in text", "surrogate", "nul in jsonb", "index row"],
)
def test_a_value_the_database_refuses_past_the_schemas_is_422_not_500(sql, value, app, rt):
    @app.get("/backstop")
    def backstop():
        with rt.pool.connection() as conn, conn.transaction():
            conn.execute("CREATE TEMP TABLE keyed (key text PRIMARY KEY) ON COMMIT DROP")
            conn.execute(sql, (value,))
        return {}

    response = app.test_client().get("/backstop")

    assert response.status_code == 422
    body = response.get_json()
    assert body["error"]["code"] == "invalid_input" and body["error"]["message"]
    assert body["trace_id"] == response.headers["X-Trace-Id"]
    with rt.pool.connection() as conn:  # the connection went back to the pool usable
        assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}


# --- the dashboard's forms and filters --------------------------------------------------------


@pytest.fixture
def browser(sign_in):
    """A test client signed in to the dashboard as the user."""
    return sign_in("user")


@pytest.mark.parametrize(
    ("field", "value"),
    [("column", NUL), ("labels", f"team={NUL}"), ("submission_key", NUL), ("chunks", "2" * 12)],
)
def test_a_bad_field_of_the_dashboards_submit_form_is_422_on_the_form(field, value, browser, db):
    form = browser.get("/ui/submit")
    data = {
        "csrf_token": csrf_of(form),
        "file": (io.BytesIO(b"a,b\n1,2\n"), "data.csv"),
        "column": "a",
        "delimiter": "comma",
        field: value,
    }

    answer = browser.post("/ui/submit", data=data, content_type="multipart/form-data")

    assert answer.status_code == 422
    assert "text/html" in answer.content_type
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


@pytest.mark.parametrize("name", ["label", "status"])
def test_a_dashboard_filter_with_a_nul_is_422(name, browser):
    answer = browser.get("/ui/", query_string={name: f"team={NUL}"})

    assert answer.status_code == 422
    assert "NUL" in answer.text
