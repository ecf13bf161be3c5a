"""Operators add, change and remove workloads from the dashboard's queue page."""

from __future__ import annotations

import re

import pytest

from services import workload_registry
from services.errors import Conflict
from tests.integration.manifests import manifest

CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(page) -> str:
    """The CSRF token a rendered page carries in its forms."""
    return CSRF_FIELD.search(page.text).group(1)


def field_error(html: str, name: str) -> str:
    """The message shown at a form control."""
    found = re.search(rf'<span class="field-error" id="{name}-error">(.*?)</span>', html, re.S)
    return found.group(1) if found else ""


@pytest.fixture
def browser(app, tokens):
    """A test client signed in to the dashboard as the operator (or `as_`)."""

    def signed_in(as_: str = "operator"):
        client = app.test_client()
        form = client.get("/ui/sign-in")
        answer = client.post(
            "/ui/sign-in", data={"csrf_token": csrf_of(form), "token": tokens[as_]}
        )
        assert answer.status_code == 303, answer.text
        return client

    return signed_in


def post_form(client, path: str, data: dict, page: str = "/ui/queue"):
    """POST a dashboard form with the CSRF token its page carries."""
    return client.post(path, data={"csrf_token": csrf_of(client.get(page)), **data})


def test_the_queue_page_offers_to_add_change_and_remove_workloads(browser):
    page = browser().get("/ui/queue").text

    assert 'id="add-workload"' in page
    assert 'href="/ui/workloads/echo"' in page
    assert 'action="/ui/workloads/echo/remove"' in page
    assert 'action="/ui/workloads/csv_stats/remove"' not in page


def test_an_operator_adds_a_workload_from_the_form(browser, rt):
    answer = post_form(browser(), "/ui/workloads", {"name": "square", "max_queued_tasks": "50"})

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
    browser, rt, data, field, status
):
    served = rt.workloads.names()

    answer = post_form(browser(), "/ui/workloads", data)

    assert answer.status_code == status
    assert field_error(answer.text, field)
    assert rt.workloads.names() == served


def test_an_operator_changes_caps_and_an_empty_box_lifts_one(browser, rt):
    client = browser()
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


def test_a_refused_change_is_shown_at_its_field_and_changes_nothing(browser, rt):
    before = rt.workloads.of("echo").caps

    answer = post_form(
        browser(),
        "/ui/workloads/echo",
        {"max_queued_tasks": "10", "max_tasks_per_job": "11"},
        page="/ui/workloads/echo",
    )

    assert answer.status_code == 422
    assert field_error(answer.text, "max_tasks_per_job")
    assert rt.workloads.of("echo").caps == before


def test_an_operator_removes_a_workload_and_a_busy_one_is_refused(browser, rt, submit):
    client = browser()
    submit(manifest(1))

    removed = post_form(client, "/ui/workloads/render/remove", {})
    busy = post_form(client, "/ui/workloads/echo/remove", {})

    assert removed.status_code == 303
    assert rt.workloads.get("render") is None
    assert busy.status_code == 409
    assert "unfinished jobs" in busy.text
    assert rt.workloads.get("echo") is not None


def test_a_form_without_the_csrf_token_changes_nothing(browser, rt):
    answer = browser().post("/ui/workloads", data={"name": "square"})

    assert answer.status_code in (400, 403)
    assert rt.workloads.get("square") is None


def test_users_may_not_add_change_or_remove_workloads(browser, rt):
    client = browser("user")
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
    browser, monkeypatch
):
    class NameTaken(Conflict):
        """A Conflict of its own kind, with no status of its own in app/errors.py."""

    def refuse(*args, **kwargs):
        raise NameTaken("workload square is already served", details={"field": "name"})

    monkeypatch.setattr(workload_registry, "add_workload", refuse)

    answer = post_form(browser(), "/ui/workloads", {"name": "square"})

    assert answer.status_code == 409
    assert "already served" in field_error(answer.text, "name")
