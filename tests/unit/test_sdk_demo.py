"""make demo's SDK job: the workload it adds at run time, and a client closed on every path."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from devstack import sdk_demo
from worker_cli import WaitTimedOut
from worker_cli.client import RequestRejected

STACK_URL = "http://127.0.0.1:5999"


class FakeStack:
    """The LocalStack's URL and tokens, and the workers the demo starts."""

    url = STACK_URL
    tokens = SimpleNamespace(user="cwu_user", operator="cwo_operator")

    def __init__(self) -> None:
        self.workers: list[tuple[str, ...]] = []

    def start_worker(self, *args: str) -> None:
        self.workers.append(args)


class FakeClient:
    """Stands in for Client: records how it was built, what it was asked, and its closing."""

    made: list[FakeClient] = []

    def __init__(self, url, token, *, add_refused=None, wait_raises=None):
        self.url, self.token, self.closed, self.added = url, token, False, []
        self.api = SimpleNamespace(add_workload=self._add)
        self._add_refused, self._wait_raises = add_refused, wait_raises
        FakeClient.made.append(self)

    def _add(self, name, caps):
        if self._add_refused:
            raise self._add_refused
        self.added.append((name, caps))

    def submit(self, workload, args_list, **options):
        return {"id": "job-1", "status": "queued"}

    def wait(self, job_id, timeout=None):
        raise self._wait_raises

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.closed = True


@pytest.fixture
def clients(monkeypatch):
    def use(**behaviour):
        FakeClient.made = []
        monkeypatch.setattr(
            sdk_demo, "Client", lambda url, token: FakeClient(url, token, **behaviour)
        )
        return FakeClient.made

    return use


def test_the_demo_workload_is_added_at_run_time_with_the_operator_token(clients):
    made = clients()

    sdk_demo.serve_workload(FakeStack())

    [operator] = made
    assert (operator.url, operator.token) == (STACK_URL, "cwo_operator")
    assert operator.added == [("collatz", {})] and operator.closed


def test_a_demo_workload_an_earlier_run_added_is_served_as_it_is(clients):
    made = clients(add_refused=RequestRejected("workload collatz is already served", status=409))

    sdk_demo.serve_workload(FakeStack())

    assert made[0].closed


def test_any_other_refusal_to_add_the_demo_workload_is_raised_and_the_client_closed(clients):
    made = clients(add_refused=RequestRejected("operators only", status=403))

    with pytest.raises(RequestRejected, match="operators only"):
        sdk_demo.serve_workload(FakeStack())
    assert made[0].closed


def test_a_demo_job_still_running_at_its_timeout_is_one_line_and_status_1(clients, capsys):
    timed_out = WaitTimedOut({"id": "job-1", "status": "running"}, 120)
    made = clients(wait_raises=timed_out)

    assert sdk_demo.run(FakeStack()) == 1

    assert capsys.readouterr().out.splitlines()[-1] == (
        "status:    job job-1 still running after 120s"
    )
    assert made[0].token == "cwu_user" and made[0].closed
