"""The S3 archive (CHUNKWISE_ARCHIVE_URL): an upload to one coordinator is served by another.

moto's server (moto[server] from PyPI, run in-process on a free loopback port) stands in for
S3; boto3 reaches it through its standard AWS_* settings, as it would reach MinIO or AWS.
"""

from __future__ import annotations

import hashlib
import socket
import time

import boto3
import moto.settings
import pytest
import requests
from botocore.exceptions import ClientError, ConnectionClosedError, ResponseStreamingError
from botocore.response import StreamingBody
from moto.server import ThreadedMotoServer

from app import create_app
from app.config import ConfigError
from app.runtime import close
from services import archive_retention, csvstats, tasks
from tests.integration.csv_worker import CsvWorker, files_under, get_job, submit, upload

BUCKET = "chunkwise-inputs"
DATA = b"id,value\n" + b"".join(b"%d,%d\n" % (i, i * 7) for i in range(5_000))
DIGEST = hashlib.sha256(DATA).hexdigest()
KEY = f"inputs/sha256/{DIGEST[:2]}/{DIGEST}"


def free_port() -> int:
    """A loopback port no one listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def s3_server(monkeypatch):
    """moto's S3 on loopback, and boto3's standard settings pointing at it."""
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    # Servers in one process share moto's state: each test starts from an empty store.
    requests.post(f"http://127.0.0.1:{port}/moto-api/reset", timeout=5).raise_for_status()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server):
    """A client on the bucket the coordinators archive into."""
    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture
def app_config(app_config, s3) -> dict:
    """Every app of these tests archives into the bucket."""
    return {**app_config, "CHUNKWISE_ARCHIVE_URL": f"s3://{BUCKET}/inputs/"}


@pytest.fixture
def other_app(app_config, tmp_path):
    """A second coordinator on the same database and bucket, with its own local directories."""
    flask_app = create_app(
        {
            **app_config,
            "CHUNKWISE_TEMP_DIR": str(tmp_path / "b" / "tmp"),
            "CHUNKWISE_ARCHIVE_DIR": str(tmp_path / "b" / "archive"),
        }
    )
    flask_app.testing = True
    yield flask_app
    close(flask_app.extensions["chunkwise.runtime"])


@pytest.fixture
def worker_at_b(other_app, headers) -> CsvWorker:
    """A csv_stats worker whose every call reaches the second coordinator."""
    return CsvWorker(other_app.test_client(), headers["worker"], "csv-at-b")


def attempts_of(db, task_id: str) -> dict:
    """The task's attempt counter and status, and how many attempt rows were closed."""
    row = db.execute("SELECT status, attempt FROM tasks WHERE id = %s", (task_id,)).fetchone()
    closed = db.execute(
        "SELECT count(*) AS n FROM task_attempts WHERE task_id = %s AND outcome IS NOT NULL",
        (task_id,),
    ).fetchone()["n"]
    return {**row, "closed": closed}


def test_a_csv_uploaded_to_one_coordinator_is_served_by_another_with_exact_results(
    client, headers, worker_at_b, s3, archive_dir
):
    job = submit(client, headers["user"], DATA, chunks=4)

    for _ in range(4):
        assert worker_at_b.run(worker_at_b.claim_one()).status_code == 200

    done = get_job(client, headers["user"], job["id"])
    assert done["status"] == "succeeded"
    assert done["result"] == csvstats.sequential_totals(DATA, "value").to_dict()
    assert s3.get_object(Bucket=BUCKET, Key=KEY)["Body"].read() == DATA
    assert files_under(archive_dir) == []  # nothing went to the local directory


def test_the_same_bytes_uploaded_twice_are_stored_once(client, headers, s3, monkeypatch, rt):
    submit(client, headers["user"], DATA, chunks=2)
    uploads = []
    real = rt.archive.client.upload_file
    monkeypatch.setattr(
        rt.archive.client, "upload_file", lambda *a, **k: uploads.append(a) or real(*a, **k)
    )

    submit(client, headers["user"], DATA, chunks=3)

    assert uploads == []
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="inputs/sha256/")
    assert [o["Key"] for o in listed["Contents"]] == [KEY]


def test_a_missing_object_answers_503_input_not_here_and_spends_no_attempt(
    client, headers, worker_at_b, s3, db
):
    submit(client, headers["user"], DATA, chunks=2)
    task = worker_at_b.claim_one()
    s3.delete_object(Bucket=BUCKET, Key=KEY)

    answer = worker_at_b.read_input(task)

    assert answer.status_code == 503
    assert answer.headers["Retry-After"]
    assert answer.get_json()["error"]["code"] == "input_not_here"
    assert answer.get_json()["error"]["details"] == {"setting": "CHUNKWISE_ARCHIVE_URL"}
    assert attempts_of(db, task["task_id"]) == {"status": "leased", "attempt": 1, "closed": 0}


def test_a_store_that_is_down_answers_503_storage_unavailable_and_spends_no_attempt(
    client, headers, worker, s3_server, db
):
    submit(client, headers["user"], DATA, chunks=2)
    task = worker.claim_one()
    s3_server.stop()

    answer = worker.read_input(task)

    assert answer.status_code == 503
    assert answer.headers["Retry-After"]
    assert answer.get_json()["error"]["code"] == "storage_unavailable"
    assert answer.get_json()["error"]["details"]["setting"] == "CHUNKWISE_ARCHIVE_URL"
    assert attempts_of(db, task["task_id"]) == {"status": "leased", "attempt": 1, "closed": 0}


def test_an_upload_while_the_store_is_down_answers_503_and_admits_nothing(
    client, headers, s3_server, db
):
    s3_server.stop()

    answer = upload(client, headers["user"], DATA, chunks=2)

    assert answer.status_code == 503
    assert answer.get_json()["error"]["code"] == "storage_unavailable"
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0


def test_a_ranged_read_from_the_bucket_answers_206_with_the_rest_of_the_chunk(
    client, headers, worker
):
    submit(client, headers["user"], DATA, chunks=2)
    task = worker.claim_one()
    whole = worker.read_bytes(task)

    answer = client.get(
        task["input_uri"],
        headers={
            **worker.headers,
            "Chunkwise-Lease-Token": task["lease_token"],
            "Range": "bytes=100-",
        },
        query_string={"worker_id": worker.worker_id, "attempt": task["attempt"]},
    )

    assert answer.status_code == 206
    assert answer.headers["Content-Range"] == f"bytes 100-{len(whole) - 1}/{len(whole)}"
    assert answer.get_data() == whole[100:]


def test_readyz_is_ready_with_a_writable_bucket_and_keeps_no_probe_object(client, s3):
    assert client.get("/readyz").status_code == 200
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET)


def test_readyz_names_the_setting_when_the_bucket_cannot_be_written(client, s3_server):
    s3_server.stop()

    answer = client.get("/readyz")

    assert answer.status_code == 503
    [problem] = answer.get_json()["error"]["details"]["storage"]
    assert problem["setting"] == "CHUNKWISE_ARCHIVE_URL"


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"CHUNKWISE_ARCHIVE_URL": "s3://no-such-bucket/x"}, "NoSuchBucket"),
        # moto checks credentials only when told to; then it knows no key at all.
        ({"AWS_ACCESS_KEY_ID": "AKIAWRONGWRONGWRONG1"}, "InvalidAccessKeyId"),
        ({"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}, "EndpointConnectionError"),
    ],
    ids=["missing bucket", "wrong credentials", "unreachable endpoint"],
)
def test_start_up_refuses_a_bucket_it_cannot_write_naming_the_setting(
    app_config, monkeypatch, env, said
):
    ours = {k: v for k, v in env.items() if k.startswith("CHUNKWISE_")}
    for name, value in env.items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    if "AWS_ACCESS_KEY_ID" in env:
        monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)

    with pytest.raises(ConfigError) as refused:
        create_app({**app_config, **ours})

    assert "CHUNKWISE_ARCHIVE_URL=s3://" in str(refused.value)
    assert said in str(refused.value)


@pytest.fixture
def small_queue_config(app_config) -> dict:
    """The bucket, a queue of two chunks, and unreferenced inputs swept after a day."""
    return {
        **app_config,
        "CHUNKWISE_MAX_QUEUED_CHUNKS": "2",
        "CHUNKWISE_ARCHIVE_RETENTION_DAYS": "1",
    }


def test_a_refused_admission_leaves_its_object_for_the_retry_then_for_the_retention_sweep(
    small_queue_config, headers, s3, monkeypatch
):
    # headers seeded the credentials through the default app; this one shares its database.
    flask_app = create_app(small_queue_config)
    try:
        client, rt = flask_app.test_client(), flask_app.extensions["chunkwise.runtime"]
        submit(client, headers["user"], b"id,value\n1,2\n3,4\n", chunks=2)

        refused = upload(client, headers["user"], DATA, chunks=2)

        assert refused.get_json()["error"]["code"] == "queue_full"
        assert s3.head_object(Bucket=BUCKET, Key=KEY)["ContentLength"] == len(DATA)
        two_days_on = time.time() + 2 * 86_400
        assert archive_retention.remove_unreferenced_inputs(rt, now=two_days_on) == 1
        assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix=KEY)
        # The sweep keeps the first job's input: that job refers to it.
        assert len(s3.list_objects_v2(Bucket=BUCKET, Prefix="inputs/sha256/")["Contents"]) == 1
    finally:
        close(flask_app.extensions["chunkwise.runtime"])


def test_an_object_read_that_breaks_mid_stream_fails_the_attempt_as_input_unavailable(
    client, headers, worker, db, monkeypatch
):
    monkeypatch.setattr(tasks, "READ_BLOCK", 64)
    submit(client, headers["user"], DATA, chunks=2)
    task = worker.claim_one()
    real_read, reads = StreamingBody.read, []

    def read_then_break(body, amt=None):
        reads.append(amt)
        if len(reads) > 1:
            raise ResponseStreamingError(error="connection reset by peer")
        return real_read(body, amt)

    monkeypatch.setattr(StreamingBody, "read", read_then_break)
    blocks = iter(worker.read_input(task, buffered=False).response)
    assert next(blocks)

    with pytest.raises(OSError):
        list(blocks)

    row = db.execute(
        "SELECT status, error_code, error_details FROM tasks WHERE id = %s", (task["task_id"],)
    ).fetchone()
    assert (row["status"], row["error_code"]) == ("pending", "input_unavailable")
    assert row["error_details"]["setting"] == "CHUNKWISE_ARCHIVE_URL"
    assert row["error_details"]["reason"] == "EIO"


def fail_calls(rt, operation: str, error: Exception, after: int = 0) -> list[str]:
    """Make the archive's S3 client raise `error` on `operation` after `after` calls pass."""
    calls: list[str] = []

    def refuse(**_):
        calls.append(operation)
        if len(calls) > after:
            raise error

    rt.archive.client.meta.events.register(f"before-call.s3.{operation}", refuse)
    return calls


def test_a_full_bucket_refuses_the_upload_naming_the_setting_and_admits_nothing(
    client, headers, rt, s3, db
):
    full = ClientError(
        {"Error": {"Code": "XMinioStorageFull", "Message": "drive threshold reached"}},
        "PutObject",
    )
    fail_calls(rt, "PutObject", full)

    answer = upload(client, headers["user"], DATA, chunks=2)

    assert answer.status_code == 503, answer.get_json()
    error = answer.get_json()["error"]
    assert error["code"] == "storage_unavailable"
    assert error["details"] == {"setting": "CHUNKWISE_ARCHIVE_URL", "reason": "XMinioStorageFull"}
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0
    assert s3.list_objects_v2(Bucket=BUCKET).get("KeyCount") == 0


def test_a_store_failing_mid_upload_leaves_no_object_and_admits_nothing(
    client, headers, rt, s3, db
):
    # Three parts of 16 MiB: the second one's call breaks, after the first was stored.
    data = b"id,value\n" + b"".join(b"%d,%d\n" % (i, i % 97) for i in range(3_500_000))
    broken = ConnectionClosedError(endpoint_url="http://store")
    calls = fail_calls(rt, "UploadPart", broken, after=1)

    answer = upload(client, headers["user"], data, chunks=2)

    assert answer.status_code == 503, answer.get_json()
    assert answer.get_json()["error"]["code"] == "storage_unavailable"
    assert len(calls) >= 2  # the upload was under way when the store broke
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0
    assert s3.list_objects_v2(Bucket=BUCKET).get("KeyCount") == 0
    assert not s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads")  # the parts are gone too
