"""The SDK against the real stack: issue 39's ten lines, a failing function, --app."""

from __future__ import annotations

import subprocess
import textwrap

import pytest

from devstack.observe import FAST
from devstack.stack import BIN
from worker_cli import Client, JobFailed, Worker


@pytest.fixture
def stack_env() -> dict:
    return {**FAST, "CHUNKWISE_ALLOWED_WORKLOADS": "square,flaky"}


def test_the_ten_line_example_stores_and_reads_back_every_value_in_order(stack):
    worker = Worker(stack.url, stack.tokens.worker)

    @worker.task("square")
    def square(args, ctx):
        return args["x"] ** 2

    client = Client(stack.url, stack.tokens.user)
    job = client.submit("square", [{"x": i} for i in range(500)], labels={"run": "demo"})
    assert worker.run(burst=True) == 0
    finished = client.wait(job["id"], timeout=60)

    assert finished["status"] == "succeeded" and finished["labels"] == {"run": "demo"}
    assert client.results(job["id"]) == [i * i for i in range(500)]


def test_a_function_that_raises_fails_the_job_and_wait_raises_job_failed_with_its_error(stack):
    worker = Worker(stack.url, stack.tokens.worker)

    @worker.task("flaky")
    def flaky(args, ctx):
        raise ValueError(f"no good: {args['x']}")

    client = Client(stack.url, stack.tokens.user)
    job = client.submit("flaky", [{"x": 1}], max_attempts=1)
    worker.run(burst=True)

    with pytest.raises(JobFailed) as failed:
        client.wait(job["id"], timeout=60)

    assert failed.value.status == "failed"
    assert "no good: 1" in str(failed.value.error)


def test_chunkwise_worker_app_runs_a_module_s_worker(stack, tmp_path):
    (tmp_path / "squares.py").write_text(
        textwrap.dedent(
            """
            from worker_cli import Worker

            worker = Worker()

            @worker.task("square")
            def square(args, ctx):
                return {"x": args["x"], "square": args["x"] ** 2, "attempt": ctx.attempt}
            """
        )
    )
    client = Client(stack.url, stack.tokens.user)
    job = client.submit("square", [{"x": 3}, {"x": 4}])

    done = subprocess.run(
        [str(BIN / "chunkwise-worker"), "--app", "squares:worker", "--burst"],
        cwd=tmp_path,
        env=stack.worker_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    client.wait(job["id"], timeout=30)
    assert client.results(job["id"]) == [
        {"x": 3, "square": 9, "attempt": 1},
        {"x": 4, "square": 16, "attempt": 1},
    ]
