"""The requests gunicorn takes, and its JSON refusals of the ones it does not."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import pytest
import requests

COLUMN = "é" * 1000  # the longest column name allowed: 6,000 bytes percent-encoded


def upload(stack, params: dict) -> requests.Response:
    """POST a one-record CSV whose header has COLUMN, with params in the query string."""
    body = f"id,{COLUMN}\n1,2\n".encode()
    return stack.api().post(
        f"{stack.url}/api/v1/jobs",
        params=params,
        data=body,
        headers={"Content-Type": "text/csv"},
        timeout=30,
    )


def test_a_csv_upload_with_the_longest_column_name_in_its_query_is_admitted(stack):
    response = upload(stack, {"column": COLUMN})

    assert response.status_code == 201, response.text


def test_a_request_line_past_8190_bytes_is_gunicorns_414_before_the_app(stack):
    labels = [("label", f"k{n}={'v' * 256}") for n in range(32)]

    response = upload(stack, [("column", COLUMN), *labels])

    assert response.status_code == 414
    assert "X-Trace-Id" not in response.headers
    assert response.json()["error"]["code"] == "uri_too_long"


def test_the_client_sends_a_form_when_the_query_would_not_fit(stack, tmp_path):
    csv = tmp_path / "data.csv"
    csv.write_bytes(f"id,{COLUMN}\n1,2\n".encode())
    labels = {f"k{n}": "v" * 256 for n in range(32)}

    with csv.open("rb") as file:
        job = stack.client().submit_csv_job(file, column=COLUMN, labels=labels)

    assert job["labels"] == labels


def raw_request(stack, head: bytes) -> tuple[int, dict, dict]:
    """Send bytes gunicorn must refuse; the status, the headers and the JSON body it answers."""
    address = urlsplit(stack.url)
    with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
        sock.sendall(head)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head_part, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head_part.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    return int(status_line.split()[1]), headers, json.loads(body)


@pytest.mark.parametrize(
    ("head", "status", "code"),
    [
        (b"NOT A REQUEST\r\n\r\n", 400, "malformed_request"),
        (b"GET /healthz HTTP/1.1\r\nBad Header\r\n\r\n", 400, "malformed_request"),
        (b"GET /healthz HTTP/9.9\r\n\r\n", 400, "malformed_request"),
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", 414, "uri_too_long"),
        (
            b"GET /healthz HTTP/1.1\r\nX-Big: " + b"v" * 9000 + b"\r\n\r\n",
            431,
            "request_header_fields_too_large",
        ),
        (
            b"GET /healthz HTTP/1.1\r\n"
            + b"".join(b"X-H%d: v\r\n" % n for n in range(101))
            + b"\r\n",
            431,
            "request_header_fields_too_large",
        ),
    ],
    ids=["request-line", "header-line", "http-version", "long-uri", "long-header", "many-headers"],
)
def test_a_request_gunicorn_refuses_is_answered_in_the_apis_json_error_body(
    stack, head, status, code
):
    got_status, headers, body = raw_request(stack, head)

    assert got_status == status
    assert headers["Content-Type"] == "application/json"
    assert body["error"]["code"] == code
    assert body["error"]["message"]
