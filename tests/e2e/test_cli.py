"""The chunkwise command as a subprocess against the real stack: results, ids, JSON, exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from devstack.observe import SHORT_POLL, totals_of, wait_for
from devstack.sample_csv import generate_csv
from devstack.stack import free_port

CHUNKWISE = str(Path(sys.executable).parent / "chunkwise")


def chunkwise(
    stack, *argv: str, token: str | None = None, url: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """Run the CLI with the user's token (or `token`) and return what it did."""
    env = {
        **os.environ,
        "CHUNKWISE_URL": url or stack.url,
        "CHUNKWISE_TOKEN": stack.tokens.user if token is None else token,
    }
    return subprocess.run(
        [CHUNKWISE, *argv], env=env, capture_output=True, text=True, timeout=timeout
    )


def chunkwise_all(
    stack, *commands: list[str], token: str | None = None
) -> list[subprocess.CompletedProcess]:
    """Run independent commands at once (each pays Python's start-up); results in order."""
    env = {
        **os.environ,
        "CHUNKWISE_URL": stack.url,
        "CHUNKWISE_TOKEN": stack.tokens.user if token is None else token,
    }
    running = [
        (
            argv,
            subprocess.Popen(
                [CHUNKWISE, *argv],
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            ),
        )
        for argv in commands
    ]
    done = []
    for argv, process in running:
        out, err = process.communicate(timeout=60)
        done.append(subprocess.CompletedProcess(argv, process.returncode, out, err))
    return done


def as_json(done: subprocess.CompletedProcess, status: int = 0):
    """The command's stdout as JSON, after checking its exit status."""
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    return json.loads(done.stdout)


def write_csv(stack, name: str, data: bytes) -> str:
    path = stack.run_dir / name
    path.write_bytes(data)
    return str(path)


def test_submit_wait_prints_the_sequential_result_and_resubmitting_finds_the_same_job(stack):
    data = generate_csv(20000, seed=5)
    path = write_csv(stack, "data.csv", data)
    stack.start_worker("worker-1", *SHORT_POLL)
    submit = [
        "submit",
        path,
        "--column",
        "value",
        "--chunks",
        "4",
        "--label",
        "team=blue",
        "--label",
        "run=7",
    ]

    waited = chunkwise(stack, *submit, "--wait")
    assert waited.returncode == 0, waited.stderr
    job_id, *result_lines = waited.stdout.splitlines()
    totals = totals_of(data)
    assert dict(line.split() for line in result_lines) == {k: str(v) for k, v in totals.items()}
    assert "succeeded  4/4 chunks  20000/20000 records" in waited.stderr

    again, again_as_json = chunkwise_all(stack, submit, [*submit, "--json"])
    assert (again.returncode, again.stdout.strip()) == (0, job_id)
    job = as_json(again_as_json)
    assert (job["id"], job["result"], job["labels"]) == (
        job_id,
        totals,
        {"team": "blue", "run": "7"},
    )

    status, result, chunks, feed, followed, quiet = chunkwise_all(
        stack,
        ["status", job_id, "--json"],
        ["result", job_id, "--json"],
        ["chunks", job_id, "--json"],
        ["events", "--json"],
        ["events", "--follow", "--json", "--after", "1", "--max-events", "2"],
        ["events", "--follow", "--after", "6", "--timeout", "1"],
    )
    assert as_json(status)["result"] == as_json(result)["result"] == totals
    chunks = as_json(chunks)["chunks"]
    assert [(c["record_start"], c["record_end"]) for c in chunks] == [
        (0, 5000),
        (5000, 10000),
        (10000, 15000),
        (15000, 20000),
    ]
    assert [e["event"] for e in as_json(feed)["events"]] == (
        ["job.created"] + ["chunk.completed"] * 4 + ["job.succeeded"]
    )
    assert [json.loads(line)["id"] for line in followed.stdout.splitlines()] == [2, 3]
    assert (quiet.returncode, quiet.stdout) == (0, "")
    by_id, by_index = chunkwise_all(
        stack, ["chunk", job_id, chunks[2]["id"], "--json"], ["chunk", job_id, "2", "--json"]
    )
    by_id, by_index = as_json(by_id), as_json(by_index)
    assert by_id["id"] == by_index["id"] == chunks[2]["id"]
    assert by_id["attempts"][0]["worker_id"] == "worker-1"

    other = write_csv(stack, "other.csv", generate_csv(100, seed=6))
    other_id = chunkwise(
        stack, "submit", other, "--column", "value", "--label", "team=red"
    ).stdout.strip()
    listed, blue, red, owned, nobodys, csv_jobs, render_jobs, its_events = chunkwise_all(
        stack,
        ["jobs", "--json"],
        ["jobs", "--label", "team=blue", "--json"],
        ["jobs", "--label", "team=red"],
        ["jobs", "--owner", "compute_user", "--json"],
        ["jobs", "--owner", "someone_else", "--json"],
        ["jobs", "--workload", "csv_stats", "--json"],
        ["jobs", "--workload", "render", "--json"],
        ["events", "--job", other_id, "--json"],
    )
    assert [j["id"] for j in as_json(listed)["jobs"]] == [other_id, job_id]
    assert [j["id"] for j in as_json(blue)["jobs"]] == [job_id]
    human = red.stdout.splitlines()
    assert len(human) == 2 and human[1].split()[:3] == [other_id, "csv_stats", "compute_user"]
    assert [j["id"] for j in as_json(owned)["jobs"]] == [other_id, job_id]
    assert as_json(nobodys)["jobs"] == []
    assert [j["id"] for j in as_json(csv_jobs)["jobs"]] == [other_id, job_id]
    assert as_json(render_jobs)["jobs"] == []
    its_events = as_json(its_events)["events"]
    assert its_events[0]["event"] == "job.created"
    assert {e["job_id"] for e in its_events} == {other_id}


def test_failed_and_cancelled_jobs_exit_1_and_retry_and_cancel_round_trip(stack):
    # No worker yet: a chunk claimed by hand fails for a reason other than its input.
    data = generate_csv(3000, seed=8)
    path = write_csv(stack, "data.csv", data)
    job_id = chunkwise(stack, "submit", path, "--column", "value", "--chunks", "2").stdout.strip()
    fail(stack, claim_as_a_worker(stack))
    assert as_json(chunkwise(stack, "status", job_id, "--json"), 1)["error"]["code"] == (
        "attempts_exhausted"
    )
    assert as_json(chunkwise(stack, "retry", job_id, "--json"))["status"] == "queued"
    not_failed = chunkwise(stack, "retry", job_id)
    assert not_failed.returncode == 3 and "not_failed" in not_failed.stderr

    stack.start_worker("worker-1", *SHORT_POLL)
    done = as_json(chunkwise(stack, "status", job_id, "--watch", "--json"))
    assert done["result"] == totals_of(data)
    bad = write_csv(stack, "bad.csv", generate_csv(2000, seed=5, malformed_at=10))
    failed, not_cancellable = chunkwise_all(
        stack, ["submit", bad, "--column", "value", "--chunks", "2", "--wait"], ["cancel", job_id]
    )
    assert not_cancellable.returncode == 3 and "not_cancellable" in not_cancellable.stderr
    assert failed.returncode == 1
    bad_id = failed.stdout.strip()
    assert f"job {bad_id} failed: invalid_input: record 10 (line 11)" in failed.stderr
    status, result, refused = chunkwise_all(
        stack, ["status", bad_id, "--json"], ["result", bad_id], ["retry", bad_id]
    )
    assert as_json(status, 1)["status"] == "failed"
    assert result.returncode == 1
    assert refused.returncode == 3
    assert "not_recoverable" in refused.stderr and "trace id" in refused.stderr
    # A warm stop lets its last long poll return, so no claim of a dead worker is in flight.
    stack.kill("worker-1", signal.SIGTERM)

    # A running job: cancel stops it (twice is harmless) and its worker hears 409.
    running = write_csv(stack, "running.csv", generate_csv(500, seed=9))
    running_id = chunkwise(stack, "submit", running, "--column", "value").stdout.strip()
    task = claim_as_a_worker(stack)
    assert as_json(chunkwise(stack, "status", running_id, "--json"))["status"] == "running"
    assert as_json(chunkwise(stack, "cancel", running_id, "--json"))["status"] == "cancelled"
    assert chunkwise(stack, "cancel", running_id).stdout.strip() == f"job {running_id} is cancelled"
    heartbeat = stack.api(stack.tokens.worker).post(
        f"{stack.url}/api/v1/tasks/{task['task_id']}/heartbeat",
        timeout=10,
        json={
            "worker_id": "by-hand",
            "attempt": task["attempt"],
            "lease_token": task["lease_token"],
        },
    )
    assert heartbeat.status_code == 409 and heartbeat.json()["error"]["code"] == "task_cancelled"
    cancelled, result = chunkwise_all(
        stack, ["status", running_id], ["result", running_id, "--json"]
    )
    assert cancelled.returncode == 1 and "was cancelled" in cancelled.stderr
    assert as_json(result, 1)["status"] == "cancelled"


def claim_as_a_worker(stack) -> dict:
    """Lease one chunk with the worker token, as a worker called by-hand."""
    claim = stack.api(stack.tokens.worker).post(
        f"{stack.url}/api/v1/tasks/claim",
        timeout=10,
        json={"worker_id": "by-hand", "workloads": ["csv_stats"]},
    )
    assert claim.status_code == 200, claim.text
    return claim.json()["tasks"][0]


def fail(stack, task: dict) -> None:
    """Report the chunk failed, not retryably, and not because of its input."""
    failure = stack.api(stack.tokens.worker).post(
        f"{stack.url}/api/v1/tasks/{task['task_id']}/failure",
        timeout=10,
        json={
            "worker_id": "by-hand",
            "attempt": task["attempt"],
            "lease_token": task["lease_token"],
            "error_code": "disk_full",
            "error_message": "no space left",
            "retryable": False,
        },
    )
    assert failure.status_code == 200, failure.text


def test_errors_exit_2_3_or_4_naming_code_and_trace_id(stack):
    stack.start_worker("worker-1", *SHORT_POLL)
    closed = f"http://127.0.0.1:{free_port()}"
    usage, no_file, unknown, queue, workers = chunkwise_all(
        stack,
        ["status", "not-a-job"],
        ["submit", "absent.csv", "--column", "value"],
        ["status", str(uuid.uuid4())],
        ["queue", "--json"],
        ["workers", "--json"],
    )
    no_token, bad_token = [
        chunkwise_all(stack, ["jobs"], token=token)[0] for token in ("", "cwu_not-a-token")
    ]
    unreachable = chunkwise(stack, "jobs", url=closed)

    assert usage.returncode == no_file.returncode == no_token.returncode == 2
    assert "usage:" in usage.stderr and "absent.csv" in no_file.stderr
    assert "CHUNKWISE_TOKEN" in no_token.stderr
    assert unknown.returncode == 3 and "not_found" in unknown.stderr
    assert bad_token.returncode == 3 and "unauthenticated" in bad_token.stderr
    assert "(HTTP 401) (trace id " in bad_token.stderr
    for forbidden in (queue, workers):
        assert (forbidden.returncode, forbidden.stdout) == (3, "")
        assert "forbidden: this view is for operators (HTTP 403)" in forbidden.stderr
    assert unreachable.returncode == 4
    assert f"coordinator unreachable at {closed}" in unreachable.stderr

    operator = stack.tokens.operator
    wait_for(
        lambda: as_json(chunkwise(stack, "workers", "--json", token=operator))["workers"],
        15,
        what="the worker to be seen",
    )
    queue, workers = chunkwise_all(stack, ["queue", "--json"], ["workers"], token=operator)
    assert as_json(queue)["max_leases_total"] > 0
    assert workers.returncode == 0 and workers.stdout.splitlines()[1].startswith("worker-1 ")


def test_an_operator_pauses_and_resumes_a_workload_from_the_command_line(stack):
    operator = stack.tokens.operator
    refused = chunkwise(stack, "pause-workload", "csv_stats")
    paused = chunkwise(stack, "pause-workload", "csv_stats", token=operator)
    listed, queue = chunkwise_all(stack, ["workloads"], ["queue"], token=operator)
    resumed = chunkwise(stack, "resume-workload", "csv_stats", token=operator)
    unknown = chunkwise(stack, "pause-workload", "nope", token=operator)

    assert refused.returncode == 3 and "(HTTP 403)" in refused.stderr
    assert paused.returncode == 0
    assert paused.stdout.startswith("workload csv_stats is paused (by operator since ")
    [row] = [line for line in listed.stdout.splitlines() if line.startswith("csv_stats ")]
    assert row.split()[1:3] == ["paused", "operator"]
    assert "paused workloads" in queue.stdout and "csv_stats (by operator since" in queue.stdout
    assert (resumed.returncode, resumed.stdout) == (0, "workload csv_stats is running\n")
    assert unknown.returncode == 3 and "not_found" in unknown.stderr


def test_cancel_jobs_cancels_every_match_in_batches_and_leaves_the_rest(stack):
    # Four different files: the same file with the same options is one job (its submit key).
    paths = [write_csv(stack, f"batch-{n}.csv", generate_csv(2_000, seed=41 + n)) for n in range(4)]
    submitted = chunkwise_all(
        stack,
        *[
            ["submit", path, "--column", "value", "--label", f"batch={batch}"]
            for path, batch in zip(paths, "xxxy", strict=True)
        ],
    )
    ids = [done.stdout.strip() for done in submitted]

    done = chunkwise(stack, "cancel-jobs", "--label", "batch=x", "--limit", "2")
    shown = [chunkwise(stack, "status", job, "--json") for job in ids]

    assert (done.returncode, done.stdout) == (0, "cancelled 3 jobs\n")
    # status exits 1 for a cancelled job, 0 for one still queued.
    assert [as_json(s, status=1)["status"] for s in shown[:3]] == ["cancelled"] * 3
    assert as_json(shown[3])["status"] == "queued"
