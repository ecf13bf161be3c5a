"""Operators add, change and remove workloads from the dashboard's queue page."""

from __future__ import annotations

import re

import pytest

from services import workload_registry
from services.errors import Conflict
from tests.integration.dashboard_forms import csrf_of
from tests.integration.manifests import manifest


def field_error(html: str, name: str) -> str:
    """The message shown at a form control."""
    found = re.search(rf'<span class="field-error" id="{name}-error">(.*?)</span>', html, re.S)
    return found.group(1) if found else ""


def post_form(client, path: str, data: dict, page: str = "/ui/queue"):
    """POST a dashboard form with the CSRF token its page carries."""
    return client.post(path, data={"csrf_token": csrf_of(client.get(page)), **data})


def test_the_queue_page_offers_to_add_change_and_remove_workloads(sign_in):
    page = sign_in("operator").get("/ui/queue").text

    assert 'id="add-workload"' in page
    assert 'href="/ui/workloads/echo"' in page
    assert 'action="/ui/workloads/echo/remove"' in page
    assert 'action="/ui/workloads/csv_stats/remove"' not in page


def test_an_operator_adds_a_workload_from_the_form(sign_in, rt):
    answer = post_form(
        sign_in("operator"), "/ui/workloads", {"name": "square", "max_queued_tasks": "50"}
    )

    assert answer.status_code == 303
    assert answer.headers["Location"].endswith("/ui/queue#workloads")
    assert rt.workloads.of("square").caps.max_queued_tasks == 50


@pytest.mark.parametrize(
    ("data", "field", "status"),
    [
        ({"name": "Bad Name"}, "name", 422),
        ({"name": "square", "max_queued_tasks": "-5"}, "max_queued_tasks", 422),
        ({"name": "square", "max_starts_per_second": "fast"}, "max_starts_per_second", 422),
        ({"name": "echo"}, "name", 409),
    ],
)
def test_a_refused_workload_is_shown_at_its_field_and_nothing_is_added(
    sign_in, rt, data, field, status
):
    served = rt.workloads.names()

    answer = post_form(sign_in("operator"), "/ui/workloads", data)

    assert answer.status_code == status
    assert field_error(answer.text, field)
    assert rt.workloads.names() == served


def test_an_operator_changes_caps_and_an_empty_box_lifts_one(sign_in, rt):
    client = sign_in("operator")
    post_form(client, "/ui/workloads", {"name": "square", "max_leases_total": "4"})
    form = client.get("/ui/workloads/square")
    assert 'name="max_leases_total" inputmode="decimal" value="4"' in form.text

    answer = post_form(
        client,
        "/ui/workloads/square",
        {"max_queued_tasks": "40", "max_tasks_per_job": "4", "max_leases_total": ""},
        page="/ui/workloads/square",
    )

    assert answer.status_code == 303
    caps = rt.workloads.of("square").caps
    assert (caps.max_queued_tasks, caps.max_tasks_per_job, caps.max_leases_total) == (40, 4, None)


def test_a_refused_change_is_shown_at_its_field_and_changes_nothing(sign_in, rt):
    before = rt.workloads.of("echo").caps

    answer = post_form(
        sign_in("operator"),
        "/ui/workloads/echo",
        {"max_queued_tasks": "10", "max_tasks_per_job": "11"},
        page="/ui/workloads/echo",
    )

    assert answer.status_code == 422
    assert field_error(answer.text, "max_tasks_per_job")
    assert rt.workloads.of("echo").caps == before


def test_an_operator_removes_a_workload_and_a_busy_one_is_refused(sign_in, rt, submit):
    client = sign_in("operator")
    submit(manifest(1))

    removed = post_form(client, "/ui/workloads/render/remove", {})
    busy = post_form(client, "/ui/workloads/echo/remove", {})

    assert removed.status_code == 303
    assert rt.workloads.get("render") is None
    assert busy.status_code == 409
    assert "unfinished jobs" in busy.text
    assert rt.workloads.get("echo") is not None


def test_a_form_without_the_csrf_token_changes_nothing(sign_in, rt):
    answer = sign_in("operator").post("/ui/workloads", data={"name": "square"})

    assert answer.status_code in (400, 403)
    assert rt.workloads.get("square") is None


def test_users_may_not_add_change_or_remove_workloads(sign_in, rt):
    client = sign_in("user")
    token = csrf_of(client.get("/ui/submit"))

    for path, data in (
        ("/ui/workloads", {"name": "square"}),
        ("/ui/workloads/echo", {"max_queued_tasks": "5"}),
        ("/ui/workloads/render/remove", {}),
    ):
        assert client.post(path, data={"csrf_token": token, **data}).status_code == 403
    assert client.get("/ui/workloads/echo").status_code == 403
    assert rt.workloads.names() == ["csv_stats", "echo", "render"]


def test_a_refusal_of_a_subclass_of_a_mapped_error_is_shown_with_its_bases_status(
    sign_in, monkeypatch
):
    class NameTaken(Conflict):
        """A Conflict of its own kind, with no status of its own in app/errors.py."""

    def refuse(*args, **kwargs):
        raise NameTaken("workload square is already served", details={"field": "name"})

    monkeypatch.setattr(workload_registry, "add_workload", refuse)

    answer = post_form(sign_in("operator"), "/ui/workloads", {"name": "square"})

    assert answer.status_code == 409
    assert "already served" in field_error(answer.text, "name")
