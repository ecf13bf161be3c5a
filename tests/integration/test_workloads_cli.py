"""`chunkwise workloads add|change|show|remove` through the API of a real coordinator."""

from __future__ import annotations

import io
import json
from urllib.parse import urlsplit

import pytest
import requests

from tests.integration.manifests import manifest
from worker_cli.chunkwise import run
from worker_cli.client import CoordinatorClient
from worker_cli.commands.invocation import EXIT_HTTP_ERROR, EXIT_OK, EXIT_USAGE

URL = "http://coordinator.test"


class FlaskAdapter(requests.adapters.BaseAdapter):
    """Carries the CLI's requests to the app's test client instead of a socket."""

    def __init__(self, app):
        super().__init__()
        self.client = app.test_client()

    def send(self, request, **kwargs):
        parts = urlsplit(request.url)
        answer = self.client.open(
            parts.path,
            method=request.method,
            query_string=parts.query,
            headers=dict(request.headers),
            data=request.body,
        )
        response = requests.Response()
        response.status_code = answer.status_code
        response.headers.update(answer.headers)
        response._content = answer.get_data()
        response.url = request.url
        response.request = request
        return response

    def close(self):
        pass


@pytest.fixture
def chunkwise(app, tokens):
    """Run the chunkwise command as the operator (or `as_`); (exit status, stdout, stderr)."""

    def invoke(*argv: str, as_: str = "operator") -> tuple[int, str, str]:
        def client_factory(url: str, token: str) -> CoordinatorClient:
            session = requests.Session()
            session.mount("http://", FlaskAdapter(app))
            return CoordinatorClient(url, token, session=session)

        out, err = io.StringIO(), io.StringIO()
        environ = {"CHUNKWISE_URL": URL, "CHUNKWISE_TOKEN": tokens[as_]}
        status = run(list(argv), client_factory=client_factory, out=out, err=err, environ=environ)
        return status, out.getvalue(), err.getvalue()

    return invoke


def test_an_operator_adds_a_workload_and_every_coordinator_serves_it(chunkwise, rt):
    status, out, _ = chunkwise("workloads", "add", "square", "--max-queued-tasks", "500")

    assert status == EXIT_OK
    assert "square" in out
    assert rt.workloads.of("square").caps.max_queued_tasks == 500


def test_change_sets_the_caps_given_and_none_lifts_one(chunkwise, rt):
    chunkwise("workloads", "add", "square", "--max-leases-total", "8")

    status, out, _ = chunkwise(
        "--json",
        "workloads",
        "change",
        "square",
        "--max-leases-total",
        "none",
        "--max-starts-per-second",
        "2.5",
    )

    assert status == EXIT_OK
    shown = json.loads(out)
    assert shown["max_leases_total"] is None
    assert shown["max_starts_per_second"] == 2.5
    assert rt.workloads.of("square").caps.max_starts_per_second == 2.5


def test_list_and_show_print_the_served_workloads(chunkwise):
    chunkwise("workloads", "add", "square")

    _, listed, _ = chunkwise("workloads")
    _, also_listed, _ = chunkwise("workloads", "list")
    status, shown, _ = chunkwise("--json", "workloads", "show", "square")

    assert listed == also_listed
    assert all(name in listed for name in ("csv_stats", "echo", "render", "square"))
    assert status == EXIT_OK
    assert json.loads(shown)["workload"] == "square"


def test_remove_stops_serving_a_workload(chunkwise, rt):
    status, out, _ = chunkwise("workloads", "remove", "render")

    assert status == EXIT_OK
    assert out.strip() == "workload render removed"
    assert rt.workloads.get("render") is None


def test_the_coordinators_refusal_names_the_field_and_exits_3(chunkwise, rt):
    status, _, err = chunkwise("workloads", "add", "Square")

    assert status == EXIT_HTTP_ERROR
    assert "invalid_input" in err
    assert "  name: must be a slug" in err
    assert rt.workloads.get("Square") is None


def test_a_taken_name_and_a_busy_workload_exit_3_with_the_conflict(chunkwise, submit):
    submit(manifest(1))

    taken = chunkwise("workloads", "add", "echo")
    busy = chunkwise("workloads", "remove", "echo")

    assert taken[0] == busy[0] == EXIT_HTTP_ERROR
    assert "already served" in taken[2]
    assert "workload_busy" in busy[2]


def test_a_user_is_refused_with_exit_3(chunkwise, rt):
    status, _, err = chunkwise("workloads", "add", "square", as_="user")

    assert status == EXIT_HTTP_ERROR
    assert "HTTP 403" in err
    assert rt.workloads.get("square") is None


@pytest.mark.parametrize(
    "argv",
    [
        ["workloads", "add"],
        ["workloads", "add", "square", "--max-queued-tasks", "many"],
        ["workloads", "add", "square", "--max-cpu", "4"],
        ["workloads", "change", "echo"],
        ["workloads", "remove"],
        ["workloads", "rename", "echo"],
    ],
)
def test_bad_usage_exits_2_and_changes_nothing(chunkwise, argv, db):
    before = db.execute("SELECT * FROM workloads ORDER BY name").fetchall()

    status, _, err = chunkwise(*argv)

    assert status == EXIT_USAGE
    assert err
    assert db.execute("SELECT * FROM workloads ORDER BY name").fetchall() == before
