"""The request line gunicorn takes: a text/csv upload's column and labels travel in it."""

from __future__ import annotations

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


def test_the_client_sends_a_form_when_the_query_would_not_fit(stack, tmp_path):
    csv = tmp_path / "data.csv"
    csv.write_bytes(f"id,{COLUMN}\n1,2\n".encode())
    labels = {f"k{n}": "v" * 256 for n in range(32)}

    with csv.open("rb") as file:
        job = stack.client().submit_csv_job(file, column=COLUMN, labels=labels)

    assert job["labels"] == labels
