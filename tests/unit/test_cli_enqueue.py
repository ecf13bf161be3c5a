"""chunkwise enqueue: a manifest job from a JSON file, --after adding to its depends_on, under a
key derived from what is asked, so re-running the command finds its job."""

from __future__ import annotations

import io
import json

from worker_cli.chunkwise import run
from worker_cli.commands.idempotency_keys import KEY_PREFIX
from worker_cli.commands.invocation import EXIT_OK, EXIT_USAGE

ENV = {"CHUNKWISE_URL": "http://c.test", "CHUNKWISE_TOKEN": "cwu_t"}
JOB = {
    "workload": "echo",
    "input_uri": "s3://in/",
    "tasks": [{"input_uri": "s3://in/0", "input_sha256": "0" * 64}],
}
FIRST = "6e56eaf5-06ec-450f-a4f0-f652955b2d63"
SECOND = "7e56eaf5-06ec-450f-a4f0-f652955b2d63"


class CapturingClient:
    """Keeps each job submitted, with its key, and answers with a created job."""

    sent: list[tuple[dict, str]] = []

    def __init__(self, url, token):
        pass

    def submit_job(self, job, *, idempotency_key, trace_id):
        CapturingClient.sent.append((job, idempotency_key))
        return {"id": "9e56eaf5-06ec-450f-a4f0-f652955b2d63", "status": "queued"}

    def close(self):
        pass


def enqueue(tmp_path, *options: str, job: dict = JOB) -> tuple[int, str, str]:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    out, err = io.StringIO(), io.StringIO()
    status = run(
        ["enqueue", str(path), *options],
        client_factory=CapturingClient,
        out=out,
        err=err,
        environ=ENV,
    )
    return status, out.getvalue(), err.getvalue()


def test_enqueue_submits_the_files_job_and_prints_its_id(tmp_path):
    CapturingClient.sent = []

    status, out, _ = enqueue(tmp_path)

    assert (status, out) == (EXIT_OK, "9e56eaf5-06ec-450f-a4f0-f652955b2d63\n")
    [(job, key)] = CapturingClient.sent
    assert job == JOB and key.startswith(KEY_PREFIX)


def test_after_adds_each_job_to_those_the_file_depends_on(tmp_path):
    CapturingClient.sent = []

    enqueue(tmp_path, "--after", SECOND, job={**JOB, "depends_on": [FIRST]})

    [(job, _)] = CapturingClient.sent
    assert job["depends_on"] == [FIRST, SECOND]


def test_the_same_job_gets_the_same_key_and_another_job_or_after_another(tmp_path):
    CapturingClient.sent = []

    enqueue(tmp_path)
    enqueue(tmp_path)
    enqueue(tmp_path, "--after", FIRST)
    enqueue(tmp_path, job={**JOB, "priority": 1})
    enqueue(tmp_path, "--idempotency-key", "mine")

    keys = [key for _, key in CapturingClient.sent]
    assert keys[0] == keys[1]
    assert len({keys[0], keys[2], keys[3], keys[4]}) == 4 and keys[4] == "mine"


def test_an_after_that_is_not_a_job_id_is_a_usage_error(tmp_path):
    CapturingClient.sent = []

    status, _, err = enqueue(tmp_path, "--after", "yesterday")

    assert status == EXIT_USAGE and "not a UUID: 'yesterday'" in err
    assert CapturingClient.sent == []
