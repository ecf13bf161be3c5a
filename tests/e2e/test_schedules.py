"""A schedule put with the chunkwise command runs on the real stack: the coordinators'
maintenance passes submit each run once, however many processes run them."""

from __future__ import annotations

import json
import time

import pytest

from devstack.observe import FAST, wait_for
from tests.e2e.test_cli import as_json, chunkwise
from tests.integration.manifests import manifest


@pytest.fixture
def stack_env() -> dict:
    """The fast stack, with a workload manifest jobs may use."""
    return {**FAST, "CHUNKWISE_ALLOWED_WORKLOADS": "echo"}


def test_a_scheduled_run_is_submitted_once_by_the_coordinators_and_the_schedule_deleted(stack, db):
    job_file = stack.run_dir / "job.json"
    job_file.write_text(json.dumps(manifest(2)))

    put = chunkwise(stack, "schedule", "nightly", "--cron", "0 3 * * *", "--job", str(job_file))
    assert put.returncode == 0, put.stderr
    assert put.stdout.startswith("schedule nightly runs next at ") and "03:00:00 UTC" in put.stdout
    listed = chunkwise(stack, "schedules")
    row = listed.stdout.splitlines()[1].split()
    assert row[:7] == ["nightly", "compute_user", "0", "3", "*", "*", "*"]

    db.execute("UPDATE schedules SET next_run_at = now() - interval '1 second'")

    def runs() -> list[dict]:
        return as_json(chunkwise(stack, "jobs", "--label", "schedule=nightly", "--json"))["jobs"]

    [job] = wait_for(runs, timeout=20, what="the scheduled run's job")
    time.sleep(2)  # several more passes of each coordinator process
    assert [j["id"] for j in runs()] == [job["id"]]
    assert job["chunks_total"] == 2
    [schedule] = as_json(chunkwise(stack, "schedules", "--json"))["schedules"]
    assert schedule["last_job_id"] == job["id"] and schedule["last_error"] is None

    deleted = chunkwise(stack, "unschedule", "nightly")
    assert (deleted.returncode, deleted.stdout) == (0, "schedule nightly deleted\n")
    assert as_json(chunkwise(stack, "schedules", "--json"))["schedules"] == []
    gone = chunkwise(stack, "unschedule", "nightly")
    assert gone.returncode == 3 and "not_found" in gone.stderr


def test_run_schedule_submits_the_schedules_job_now_and_prints_its_id(stack):
    job_file = stack.run_dir / "job.json"
    job_file.write_text(json.dumps(manifest(3)))
    chunkwise(stack, "schedule", "nightly", "--cron", "@daily", "--job", str(job_file), "--paused")

    ran = chunkwise(stack, "run-schedule", "nightly")

    assert ran.returncode == 0, ran.stderr
    job = as_json(chunkwise(stack, "status", ran.stdout.strip(), "--json"))
    assert (job["chunks_total"], job["labels"]) == (3, {"schedule": "nightly"})
    [schedule] = as_json(chunkwise(stack, "schedules", "--json"))["schedules"]
    assert schedule["paused"] and schedule["last_job_id"] is None


def test_an_operator_pauses_runs_resumes_and_deletes_a_users_schedule_with_owner(stack):
    job_file = stack.run_dir / "job.json"
    job_file.write_text(json.dumps(manifest(1)))
    chunkwise(stack, "schedule", "nightly", "--cron", "@daily", "--job", str(job_file))
    operator = stack.tokens.operator

    def as_operator(command: str) -> str:
        done = chunkwise(stack, command, "nightly", "--owner", "compute_user", token=operator)
        assert done.returncode == 0, done.stderr
        return done.stdout

    paused = as_operator("pause-schedule")
    job_id = as_operator("run-schedule").strip()
    resumed = as_operator("resume-schedule")
    job = as_json(chunkwise(stack, "status", job_id, "--json"))
    mine = chunkwise(stack, "pause-schedule", "nightly", "--owner", "operator", token=operator)
    deleted = as_operator("unschedule")

    assert paused == "schedule nightly is paused\n"
    assert job["owner"] == "compute_user" and job["labels"] == {"schedule": "nightly"}
    assert resumed.startswith("schedule nightly runs next at ") and "00:00:00 UTC" in resumed
    assert mine.returncode == 3 and "not_found" in mine.stderr  # the operator's own: none
    assert deleted == "schedule nightly deleted\n"
    assert as_json(chunkwise(stack, "schedules", "--json"))["schedules"] == []
