"""The CSV upload body: a well-formed multipart form whose file part is read block by block."""

from __future__ import annotations

import io
from urllib.parse import parse_qsl, urlsplit

import requests
from werkzeug.formparser import parse_form_data

from worker_cli.client import CoordinatorClient
from worker_cli.uploads import FileBody, MultipartUpload

FIELDS = [("column", "value"), ("label", "team=a"), ("label", 'quote="x"')]


class ReadRecorder(io.FileIO):
    """A real file that remembers the size of every read."""

    def __init__(self, path):
        super().__init__(path, "rb")
        self.reads: list[int] = []

    def read(self, size=-1):
        self.reads.append(size)
        return super().read(size)


def parse(body: MultipartUpload):
    payload = b"".join(body)
    environ = {
        "REQUEST_METHOD": "POST",
        "CONTENT_TYPE": body.content_type,
        "CONTENT_LENGTH": str(len(payload)),
        "wsgi.input": io.BytesIO(payload),
    }
    _, form, files = parse_form_data(environ)
    return payload, form, files


def test_upload_body_is_a_form_the_server_parses(tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes(b"id,value\n1,5\n2,7\n")
    with path.open("rb") as file:
        body = MultipartUpload(FIELDS, "file", file, 'my "data".csv')
        payload, form, files = parse(body)
    assert len(payload) == len(body)
    assert form["column"] == "value"
    assert form.getlist("label") == ["team=a", 'quote="x"']
    assert files["file"].read() == b"id,value\n1,5\n2,7\n"
    assert files["file"].content_type == "text/csv"


def test_upload_reads_the_file_in_blocks_never_whole(tmp_path):
    path = tmp_path / "big.csv"
    path.write_bytes(b"v\n" + b"12345\n" * 100_000)
    with ReadRecorder(path) as file:
        body = MultipartUpload([], "file", file, "big.csv", block_size=64 * 1024)
        _, _, files = parse(body)
    assert files["file"].read() == path.read_bytes()
    assert file.reads and all(size == 64 * 1024 for size in file.reads)


def test_upload_length_counts_only_what_is_left_of_the_file(tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes(b"skip,me\nid,value\n")
    with path.open("rb") as file:
        file.seek(8)
        body = MultipartUpload([], "file", file, "data.csv")
        payload, _, files = parse(body)
    assert len(payload) == len(body)
    assert files["file"].read() == b"id,value\n"


def capture_submit(tmp_path, **options) -> tuple[dict, dict]:
    """Submit data.csv through a client whose transport keeps what it was sent."""
    path = tmp_path / "data.csv"
    path.write_bytes(b"id,value\n1,5\n")
    sent = {}

    class CapturingAdapter(requests.adapters.BaseAdapter):
        def send(self, request, **kwargs):
            sent["url"] = request.url
            sent["headers"] = request.headers
            sent["body"] = b"".join(request.body)
            response = requests.Response()
            response.status_code, response._content = 201, b'{"id": "j1"}'
            return response

        def close(self):
            pass

    session = requests.Session()
    session.mount("http://", CapturingAdapter())
    client = CoordinatorClient("http://coordinator.test", "cwu_t", session=session)
    with path.open("rb") as file:
        job = client.submit_csv_job(
            file,
            column="value",
            chunks=3,
            labels={"team": "a"},
            idempotency_key="key-1",
            **options,
        )
    assert job == {"id": "j1"}
    return sent, sent["headers"]


def test_submit_sends_the_file_as_the_body_and_the_parameters_in_the_query(tmp_path):
    sent, headers = capture_submit(tmp_path)
    assert headers["Content-Type"] == "text/csv"
    assert headers["Idempotency-Key"] == "key-1"
    assert int(headers["Content-Length"]) == len(sent["body"])
    assert sent["body"] == b"id,value\n1,5\n"
    query = parse_qsl(urlsplit(sent["url"]).query)
    assert query == [
        ("column", "value"),
        ("delimiter", ","),
        ("chunks", "3"),
        ("priority", "0"),
        ("label", "team=a"),
    ]


def test_submit_sends_a_schedule_only_when_given(tmp_path):
    sent, _ = capture_submit(tmp_path, not_before="2026-12-06T00:00:00+00:00")
    query = parse_qsl(urlsplit(sent["url"]).query)
    assert query[-1] == ("not_before", "2026-12-06T00:00:00+00:00")
    sent, _ = capture_submit(tmp_path)
    assert "not_before" not in dict(parse_qsl(urlsplit(sent["url"]).query))


def test_file_body_reads_the_file_in_blocks_from_where_it_stands(tmp_path):
    path = tmp_path / "data.csv"
    path.write_bytes(b"skip,me\n" + b"x" * 10)
    with path.open("rb") as file:
        file.seek(8)
        body = FileBody(file, block_size=4)
        assert len(body) == 10
        assert list(body) == [b"xxxx", b"xxxx", b"xx"]


def test_submit_sends_the_form_with_content_length_and_idempotency_key(tmp_path):
    sent, headers = capture_submit(tmp_path, form=True)
    assert headers["Idempotency-Key"] == "key-1"
    assert headers["Content-Type"].startswith("multipart/form-data; boundary=")
    assert int(headers["Content-Length"]) == len(sent["body"])
    assert b'name="chunks"\r\n\r\n3\r\n' in sent["body"]
    assert b'filename="data.csv"' in sent["body"]
    assert b"team=a" in sent["body"]
    assert urlsplit(sent["url"]).query == ""
