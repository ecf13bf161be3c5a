"""The SDK's Worker: task functions registered by name, run by chunkwise-worker's own loop."""

from __future__ import annotations

import json
import signal
import textwrap
import threading
import time

import pytest

from services import workloads
from tests.unit.fakes import FakeClient, FakeClock, task_payload
from worker_cli import MissingSetting, Worker, tasks
from worker_cli.handlers import BUILTIN_HANDLERS
from worker_cli.worker import main

URL = "http://coordinator.test"
STORED_ELSEWHERE = {"result_uri": "s3://bucket/r", "result_sha256": "ab" * 32}


class Coordinator(FakeClient):
    """The scripted coordinator, standing in for the HTTP client the loop would open."""

    def __init__(self, *claims):
        super().__init__(FakeClock(), claims=claims)
        self.opened_with: tuple | None = None
        self.closed = False

    def __call__(self, url, token):
        self.opened_with = (url, token)
        return self

    def close(self):
        self.closed = True


@pytest.fixture
def coordinator(monkeypatch):
    monkeypatch.setenv("CHUNKWISE_URL", URL)
    monkeypatch.setenv("CHUNKWISE_WORKER_TOKEN", "cw_worker")

    def install(*claims):
        fake = Coordinator(*claims)
        monkeypatch.setattr("worker_cli.worker.CoordinatorClient", fake)
        return fake

    return install


def with_args(task_id, args, **fields):
    """A claimed task of the workload square, its args as the claim response carries them."""
    text = json.dumps(args, sort_keys=True, separators=(",", ":"))
    payload = task_payload(task_id, workload="square", data=text.encode(), **fields)
    return {**payload, "args": text}


def test_a_task_function_gets_its_args_and_context_and_its_result_is_submitted(coordinator):
    fake = coordinator([with_args("t1", {"x": 3}), with_args("t2", {"x": 4}, attempt=2)])
    worker = Worker()
    seen = []

    @worker.task("square")
    def square(args, ctx):
        seen.append((args["x"], ctx.task_id, ctx.attempt, ctx.trace_id))
        return STORED_ELSEWHERE

    assert worker.run(burst=True) == 0

    assert sorted(x for x, *_ in seen) == [3, 4]
    assert {(task_id, attempt) for _, task_id, attempt, _ in seen} == {("t1", 1), ("t2", 2)}
    assert all(len(trace_id) == 32 for *_, trace_id in seen)
    assert sorted(r["task_id"] for r in fake.results) == ["t1", "t2"]
    assert all(r["result"]["result_uri"] == "s3://bucket/r" for r in fake.results)
    assert fake.claims[0]["workloads"] == ["square"]
    assert fake.opened_with == (URL, "cw_worker") and fake.closed


def test_a_task_function_s_bare_return_value_is_sent_as_a_value_to_store(coordinator):
    fake = coordinator([with_args("t1", {"x": 3}), with_args("t2", {"x": None})])
    worker = Worker()

    @worker.task("square")
    def square(args, ctx):
        return None if args["x"] is None else args["x"] ** 2

    worker.run(burst=True)

    values = {r["task_id"]: r["result"]["value"] for r in fake.results}
    assert values == {"t1": 9, "t2": None}


def test_an_async_task_function_runs_to_completion(coordinator):
    fake = coordinator([with_args("t1", {"x": 5})])
    worker = Worker()

    @worker.task("square")
    async def square(args, ctx):
        return {**STORED_ELSEWHERE, "metrics": {"records": args["x"]}}

    worker.run(burst=True)

    assert fake.results[0]["result"]["metrics"]["records"] == 5


def test_an_exception_in_a_task_function_is_a_reported_failure_with_its_traceback(coordinator):
    fake = coordinator([with_args("t1", {"x": -1})])
    worker = Worker()

    @worker.task("square")
    def square(args, ctx):
        raise ValueError("x must be positive")

    worker.run(burst=True)

    failure = fake.failures[0]
    assert failure["error_code"] == "worker_error" and failure["retryable"]
    assert "x must be positive" in failure["error_message"]
    assert "in square" in failure["details"]["traceback"]


def test_a_task_resumes_from_the_checkpoint_an_earlier_attempt_saved(coordinator):
    coordinator([with_args("t1", {"n": 10}, attempt=2, checkpoint={"done": 6})])
    worker = Worker()
    restored = []

    @worker.task("square")
    def count(args, ctx):
        restored.append(ctx.restore_checkpoint())
        ctx.save_checkpoint({"done": 8})
        restored.append(ctx.restore_checkpoint())
        ctx.raise_if_stopped()
        return STORED_ELSEWHERE

    worker.run(burst=True)

    assert restored == [{"done": 6}, {"done": 8}]


def test_the_worker_s_options_shape_the_loop_it_runs(coordinator):
    fake = coordinator()
    worker = Worker(capacity=7, worker_id="sdk-1")
    worker.task("square")(lambda args, ctx: None)
    worker.task("cube")(lambda args, ctx: None)

    worker.run(burst=True)

    claim = fake.claims[0]
    assert (claim["worker_id"], claim["capacity"]) == ("sdk-1", 7)
    assert claim["workloads"] == ["square", "cube"]
    assert claim["wait_seconds"] == 0  # a burst does not long-poll


def test_run_restores_the_signal_handlers_it_replaced(coordinator):
    coordinator()
    worker = Worker()
    worker.task("square")(lambda args, ctx: None)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)

    worker.run(burst=True)

    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_stop_ends_a_run_started_on_another_thread(coordinator):
    coordinator()
    worker = Worker()
    worker.task("square")(lambda args, ctx: None)
    status = []
    running = threading.Thread(target=lambda: status.append(worker.run()))
    running.start()

    deadline = time.monotonic() + 5
    while worker._loop is None and running.is_alive() and time.monotonic() < deadline:
        running.join(0.01)
    assert worker._loop is not None, "run() never started its lease loop"
    worker.stop()
    running.join(5)

    assert not running.is_alive() and status == [0]


def test_run_without_a_worker_token_raises_missing_setting(monkeypatch):
    monkeypatch.setenv("CHUNKWISE_URL", URL)
    monkeypatch.delenv("CHUNKWISE_WORKER_TOKEN", raising=False)
    worker = Worker()
    worker.task("square")(lambda args, ctx: None)

    with pytest.raises(MissingSetting, match="^CHUNKWISE_WORKER_TOKEN is not set"):
        worker.run(burst=True)


def test_run_with_no_task_registered_says_how_to_register_one():
    with pytest.raises(ValueError, match=r"@worker.task"):
        Worker(URL, "cw_worker").run(burst=True)


@pytest.mark.parametrize("name", ["", "x" * 64, "Square", "1st", "_x", "a.b", "a b", "é", 7])
def test_a_task_name_that_is_not_a_workload_slug_is_refused_at_registration(name):
    with pytest.raises(ValueError, match="a slug: a-z"):
        Worker().task(name)


@pytest.mark.parametrize("name", ["a", "x" * 63, "csv_stats", "square-2"])
def test_a_task_name_that_is_a_workload_slug_is_accepted(name):
    assert Worker().task(name)(len) is len


def test_the_sdk_s_task_name_rule_is_the_coordinator_s():
    assert tasks.TASK_NAME.pattern == workloads.NAME.pattern
    assert tasks.TASK_NAME_RULE == workloads.NAME_RULE


def test_two_tasks_of_one_name_are_refused():
    worker = Worker()
    worker.task("square")(lambda args, ctx: None)

    with pytest.raises(ValueError, match="already registered"):
        worker.task("square")


def test_a_worker_s_tasks_win_and_other_workloads_keep_their_handlers():
    worker = Worker()

    @worker.task("square")
    def square(args, ctx):
        return None

    handlers = worker.handlers_for(["square", "csv_stats"])

    assert handlers["csv_stats"] is BUILTIN_HANDLERS["csv_stats"]
    assert handlers["square"] is not square  # wrapped: called with (args, ctx)


# -- chunkwise-worker --app ---------------------------------------------------------------

APP = """
from worker_cli import Worker

worker = Worker(capacity=3)
not_a_worker = 5
idle = Worker()
pinned = Worker("http://pinned.test", "cw_pinned")
pinned.task("square")(lambda args, ctx: None)


@worker.task("square")
def square(args, ctx):
    return {"result_uri": "s3://bucket/r", "result_sha256": "ab" * 32}
"""


@pytest.fixture
def app_dir(tmp_path, monkeypatch):
    (tmp_path / "sdk_app.py").write_text(textwrap.dedent(APP))
    (tmp_path / "broken_app.py").write_text("import no_such_dependency\n")
    monkeypatch.chdir(tmp_path)  # where the command runs; --app finds modules there
    return tmp_path


def test_chunkwise_worker_app_runs_the_worker_s_tasks_with_its_options(app_dir, coordinator):
    fake = coordinator([with_args("t1", {"x": 2})])

    assert main(["--app", "sdk_app:worker", "--burst"]) == 0

    assert fake.claims[0]["workloads"] == ["square"]
    assert fake.claims[0]["capacity"] == 3
    assert [r["task_id"] for r in fake.results] == ["t1"]


def test_chunkwise_worker_flags_win_over_the_app_s_options(app_dir, coordinator):
    fake = coordinator()

    assert main(["--app", "sdk_app", "--burst", "--capacity", "5"]) == 0

    assert fake.claims[0]["capacity"] == 5


def test_an_app_worker_s_own_url_and_token_win_over_the_environment(app_dir, coordinator):
    fake = coordinator()

    assert main(["--app", "sdk_app:pinned", "--burst"]) == 0
    assert fake.opened_with == ("http://pinned.test", "cw_pinned")

    assert main(["--app", "sdk_app:pinned", "--burst", "--coordinator", URL]) == 0
    assert fake.opened_with == (URL, "cw_pinned")  # and the flag over the Worker's


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("no_such_module:worker", "cannot import no_such_module: ModuleNotFoundError"),
        ("broken_app:worker", "cannot import broken_app: ModuleNotFoundError"),
        ("sdk_app:nothing", "module sdk_app has no attribute 'nothing'"),
        ("sdk_app:not_a_worker", "sdk_app.not_a_worker is a int, not a worker_cli.Worker"),
        ("sdk_app:idle", "sdk_app.idle has no task registered"),
        (":worker", "give MODULE:ATTR"),
    ],
)
def test_an_app_that_does_not_import_or_names_no_worker_is_a_one_line_error_with_status_2(
    app_dir, coordinator, capsys, spec, says
):
    fake = coordinator()

    assert main(["--app", spec, "--burst"]) == 2

    err = capsys.readouterr().err
    assert says in err and err.startswith("chunkwise-worker: --app")
    assert err.count("\n") == 1
    assert fake.claims == []
