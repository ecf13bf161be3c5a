"""Two coordinators on one database and one bucket: a CSV uploaded through one is served by
the other to a real worker (issue 38).

moto's S3 server (moto[server] from PyPI, run as its own process) stands in for the store.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import boto3
import pytest
import requests

from devstack.observe import FAST, SHORT_POLL, Jobs, big_csv, totals_of, wait_for
from devstack.stack import LocalStack, free_port

BUCKET = "chunkwise-e2e"
MOTO_SERVER = Path(sys.executable).parent / "moto_server"


@pytest.fixture
def s3_endpoint(tmp_path):
    """moto's S3 server on a free loopback port, with the bucket made."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "moto.log").open("wb")
    server = subprocess.Popen(
        [str(MOTO_SERVER), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log
    )
    try:
        wait_for(lambda: _answers(url), timeout=20, what="moto's S3 server")
        s3 = boto3.client(
            "s3",
            endpoint_url=url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        s3.create_bucket(Bucket=BUCKET)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=1).status_code < 500
    except requests.RequestException:
        return False


@pytest.fixture
def stack_env(s3_endpoint) -> dict:
    """Every process archives into the bucket."""
    return {
        **FAST,
        "CHUNKWISE_ARCHIVE_URL": f"s3://{BUCKET}/e2e",
        # Coordinators behind one balancer share the session key, or the later one is not
        # ready (settings_differ): each would otherwise make its own key file.
        "CHUNKWISE_SECRET_KEY": "e2e-two-coordinators-session-key-0123456789",
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
    }


@pytest.fixture
def second_coordinator(stack, stack_env, tmp_path):
    """Another gunicorn on the same database and bucket, with its own port and directories."""
    other = LocalStack(
        database_url=stack.database_url, run_dir=tmp_path / "b", env=stack_env, tokens=stack.tokens
    )
    # What prepare() makes, less the migrations and seeding the first stack did.
    other.run_dir.mkdir(mode=0o700)
    (other.run_dir / "prometheus").mkdir(mode=0o700)
    other.start_coordinator()
    yield other
    other.stop()


def test_a_csv_uploaded_to_one_coordinator_is_computed_through_another(
    stack, second_coordinator, db
):
    data = big_csv(60_000)
    job = Jobs(stack, db).submit(data, 4)

    second_coordinator.start_worker("worker-at-b", *SHORT_POLL, "--capacity", "2")
    done = Jobs(second_coordinator, db).wait(job["id"], "succeeded", timeout=60)

    assert done["result"] == totals_of(data)
    attempts = db.execute("SELECT count(*) AS n FROM task_attempts").fetchone()["n"]
    assert attempts == 4  # one each: no read failed on the coordinator without a local copy
    for run_dir in (stack.run_dir, second_coordinator.run_dir):
        assert not any((run_dir / "archive").rglob("*")), "the local directory stays empty"


def test_gunicorn_refuses_to_start_on_a_bucket_it_cannot_write_naming_the_setting(
    database_url, stack_env, tmp_path
):
    refused = LocalStack(database_url=database_url, run_dir=tmp_path / "refused", env=stack_env)
    refused.prepare()  # seed-local builds the app, which checks the bucket too
    refused.env = {**stack_env, "CHUNKWISE_ARCHIVE_URL": "s3://no-such-bucket/e2e"}
    try:
        with pytest.raises(TimeoutError):
            refused.start_coordinator(timeout=10)
        assert refused.processes["coordinator"].wait(timeout=10) != 0
        log = (refused.logs / "coordinator.log").read_text()
        assert (
            "CHUNKWISE_ARCHIVE_URL=s3://no-such-bucket/e2e/ cannot be written (NoSuchBucket)" in log
        )
    finally:
        refused.stop()
