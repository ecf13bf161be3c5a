"""Operators add, change and remove workloads at run time; every coordinator hears at once."""

from __future__ import annotations

import threading

import pytest
from psycopg_pool import PoolTimeout

from app import create_app
from app.runtime import close
from repositories import workload_registry as workload_rows
from services import workload_registry
from services.errors import Forbidden, InvalidInput
from tests.integration.csv_worker import settings
from tests.integration.manifests import manifest

WORKLOADS = "/api/v1/workloads"


@pytest.fixture
def call(client, headers):
    """Call /api/v1/workloads[/{name}] as the operator (or `as_`); the response."""

    def request(method: str, name: str | None = None, body: dict | None = None, as_="operator"):
        path = WORKLOADS if name is None else f"{WORKLOADS}/{name}"
        return client.open(path, method=method, json=body, headers=headers[as_])

    return request


@pytest.fixture
def second_app(app, app_config, request):
    """Another coordinator on the same database, started after `app` as a second host would
    run it (with any settings a test gives it)."""
    other = create_app({**app_config, **getattr(request, "param", {})})
    other.testing = True
    yield other
    close(other.extensions["chunkwise.runtime"])


def square(tasks: int = 1) -> dict:
    """A manifest job for the `square` workload."""
    return {**manifest(tasks), "workload": "square"}


def stored_row(db, name: str) -> dict | None:
    return db.execute("SELECT * FROM workloads WHERE name = %s", (name,)).fetchone()


def field_errors(response) -> dict:
    return response.get_json()["error"]["details"]["fields"]


def test_an_added_workload_takes_jobs_at_once_where_it_was_refused_before(call, client, headers):
    refused = client.post("/api/v1/jobs", json=square(), headers=headers["user"])
    assert refused.status_code == 422
    assert "workload" in field_errors(refused)

    added = call("POST", body={"name": "square", "max_queued_tasks": 500})

    assert added.status_code == 201
    assert added.get_json()["workload"] == "square"
    assert added.get_json()["max_queued_tasks"] == 500
    assert client.post("/api/v1/jobs", json=square(), headers=headers["user"]).status_code == 201


def test_caps_not_given_take_the_settings_manifest_defaults(call, rt):
    body = call("POST", body={"name": "square"}).get_json()

    defaults = rt.workloads.of("echo").caps
    assert body["max_queued_tasks"] == defaults.max_queued_tasks
    assert body["max_tasks_per_job"] == defaults.max_tasks_per_job
    assert body["max_leases_total"] is None
    assert body["max_starts_per_second"] is None
    assert body["paused"] is False


def test_the_settings_workloads_are_in_the_table_and_listed(call, db):
    listed = call("GET").get_json()["workloads"]

    assert [w["workload"] for w in listed] == ["csv_stats", "echo", "render"]
    assert stored_row(db, "echo")["changed_by"] is None  # seeded, no operator touched it


def test_one_workload_is_shown_with_its_caps(call):
    call("POST", body={"name": "square", "max_starts_per_second": 2.5})

    shown = call("GET", "square")

    assert shown.status_code == 200
    assert shown.get_json()["max_starts_per_second"] == 2.5
    assert call("GET", "nothing").status_code == 404


@pytest.mark.parametrize("name", ["echo", "csv_stats"])
def test_adding_a_served_name_is_409_naming_the_field(call, name, db):
    before = stored_row(db, name)

    response = call("POST", body={"name": name, "max_queued_tasks": 7})

    assert response.status_code == 409
    assert response.get_json()["error"]["details"] == {"field": "name"}
    assert stored_row(db, name) == before


@pytest.mark.parametrize(
    "name", ["Square", "1square", "sq uare", "", "s" * 64, "sq/uare", "sq\nuare", "é", 5, None]
)
def test_a_name_that_is_not_a_slug_is_422_naming_the_field_and_stores_nothing(call, name, db):
    rows = db.execute("SELECT count(*) AS n FROM workloads").fetchone()["n"]

    response = call("POST", body={"name": name})

    assert response.status_code == 422
    assert "name" in field_errors(response)
    assert db.execute("SELECT count(*) AS n FROM workloads").fetchone()["n"] == rows


def test_a_name_is_required(call):
    response = call("POST", body={"max_queued_tasks": 5})

    assert response.status_code == 422
    assert "name" in field_errors(response)


BAD_CAPS = [
    ("max_queued_tasks", -1),
    ("max_queued_tasks", 0),
    ("max_queued_tasks", 10**9),
    ("max_queued_tasks", None),
    ("max_queued_tasks", "many"),
    ("max_tasks_per_job", 2**31),
    ("max_leases_per_worker", 1.5),
    ("max_leases_per_worker", True),
    ("max_leases_total", -3),
    ("max_starts_per_second", 0),
    ("max_starts_per_second", -1.0),
    ("max_starts_per_second", 1e9),
    ("max_queued_tasks_per_user", 0),
    ("max_stored_bytes_per_user", 2**50),
]


@pytest.mark.parametrize(("field", "value"), BAD_CAPS)
def test_a_negative_or_absurd_cap_is_422_naming_it_and_adds_nothing(call, field, value, db):
    response = call("POST", body={"name": "square", field: value})

    assert response.status_code == 422
    assert field in field_errors(response)
    assert stored_row(db, "square") is None


@pytest.mark.parametrize(("field", "value"), BAD_CAPS)
def test_a_negative_or_absurd_cap_is_422_naming_it_and_changes_nothing(call, field, value, db):
    before = stored_row(db, "echo")

    response = call("PATCH", "echo", {field: value})

    assert response.status_code == 422
    assert field in field_errors(response)
    assert stored_row(db, "echo") == before


@pytest.mark.parametrize("method", ["POST", "PATCH"])
def test_an_unknown_field_is_422_naming_it(call, method, db):
    before = stored_row(db, "echo")
    name = "square" if method == "POST" else "echo"
    body = {"name": name, "max_cpu": 4} if method == "POST" else {"max_cpu": 4}

    response = call(method, None if method == "POST" else name, body)

    assert response.status_code == 422
    assert "max_cpu" in field_errors(response)
    assert stored_row(db, "square") is None
    assert stored_row(db, "echo") == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_leases_per_worker": 5, "max_leases_total": 4}, "max_leases_per_worker"),
        ({"max_queued_tasks": 10, "max_tasks_per_job": 11}, "max_tasks_per_job"),
    ],
)
def test_caps_that_contradict_each_other_are_422_naming_the_field(call, body, field, db):
    added = call("POST", body={"name": "square", **body})
    changed = call("PATCH", "echo", body)

    assert added.status_code == changed.status_code == 422
    assert field in field_errors(added)
    assert field in field_errors(changed)
    assert stored_row(db, "square") is None
    assert stored_row(db, "echo")["changed_by"] is None


def test_a_change_is_checked_against_the_caps_it_leaves_alone(call):
    call("POST", body={"name": "square", "max_queued_tasks": 100, "max_tasks_per_job": 10})

    response = call("PATCH", "square", {"max_queued_tasks": 5})

    assert response.status_code == 422
    assert "max_tasks_per_job" in field_errors(response)


def test_a_change_sets_the_caps_given_and_keeps_the_others(call, rt, db):
    before = call("GET", "echo").get_json()

    response = call("PATCH", "echo", {"max_tasks_per_job": 3, "max_starts_per_second": 4})

    assert response.status_code == 200
    after = response.get_json()
    assert after["max_tasks_per_job"] == 3
    assert after["max_starts_per_second"] == 4
    assert after["max_queued_tasks"] == before["max_queued_tasks"]
    assert rt.workloads.of("echo").caps.max_starts_per_second == 4
    assert stored_row(db, "echo")["changed_by"] == "operator"


def test_null_lifts_a_cap_that_may_be_lifted(call, rt):
    call("PATCH", "echo", {"max_leases_total": 9})

    response = call("PATCH", "echo", {"max_leases_total": None})

    assert response.get_json()["max_leases_total"] is None
    assert rt.workloads.of("echo").caps.max_leases_total is None


def test_a_changed_cap_holds_at_the_next_submission(call, submit, client, headers):
    call("PATCH", "echo", {"max_tasks_per_job": 2})

    too_big = client.post("/api/v1/jobs", json=manifest(3), headers=headers["user"])

    assert too_big.status_code == 422
    assert "at most 2 tasks" in too_big.get_json()["error"]["message"]
    assert submit(manifest(2))["chunks_total"] == 2


def test_changing_a_missing_workload_is_404_and_stores_nothing(call, db):
    response = call("PATCH", "square", {"max_queued_tasks": 5})

    assert response.status_code == 404
    assert stored_row(db, "square") is None


def test_a_change_that_changes_nothing_is_422(call):
    response = call("PATCH", "echo", {})

    assert response.status_code == 422


def test_a_removed_workload_takes_no_more_jobs(call, client, headers, db):
    response = call("DELETE", "render")

    assert response.status_code == 204
    refused = client.post(
        "/api/v1/jobs", json={**manifest(1), "workload": "render"}, headers=headers["user"]
    )
    assert refused.status_code == 422
    assert "workload" in field_errors(refused)
    assert [w["workload"] for w in call("GET").get_json()["workloads"]] == ["csv_stats", "echo"]
    assert call("GET", "render").status_code == 404
    assert call("PATCH", "render", {"max_queued_tasks": 5}).status_code == 404
    assert call("DELETE", "render").status_code == 404


def test_removing_a_workload_with_unfinished_jobs_is_409_naming_it(call, submit, client, headers):
    job = submit(manifest(2))

    response = call("DELETE", "echo")

    assert response.status_code == 409
    error = response.get_json()["error"]
    assert error["code"] == "workload_busy"
    assert error["details"] == {"workload": "echo", "unfinished_jobs": 1}
    assert call("GET", "echo").status_code == 200

    client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=headers["user"])
    assert call("DELETE", "echo").status_code == 204


def test_the_built_in_csv_stats_cannot_be_removed(call):
    response = call("DELETE", "csv_stats")

    assert response.status_code == 409
    assert call("GET", "csv_stats").status_code == 200


def test_a_removed_workload_can_be_added_again_without_its_old_pause(call, client, headers):
    client.post(f"{WORKLOADS}/render/pause", headers=headers["operator"])
    call("DELETE", "render")

    again = call("POST", body={"name": "render", "max_queued_tasks": 9})

    assert again.status_code == 201
    assert again.get_json()["max_queued_tasks"] == 9
    assert again.get_json()["paused"] is False


def test_a_seed_never_overrides_what_operators_changed_added_or_removed(call, rt, db):
    call("PATCH", "echo", {"max_queued_tasks": 77, "max_tasks_per_job": 7})
    call("DELETE", "render")
    call("POST", body={"name": "square", "max_queued_tasks": 5})

    # What a coordinator starting with these settings does.
    seeds = workload_registry.seed_caps(rt.limits)
    workload_registry.refresh(rt.pool, rt.workloads, seeds)

    assert rt.workloads.of("echo").caps.max_queued_tasks == 77
    assert rt.workloads.get("render") is None
    assert rt.workloads.of("square").caps.max_queued_tasks == 5


@pytest.mark.parametrize(
    "second_app",
    [
        {
            "CHUNKWISE_MANIFEST_MAX_QUEUED_TASKS": "4321",
            "CHUNKWISE_MANIFEST_MAX_TASKS_PER_JOB": "4000",
        }
    ],
    indirect=["second_app"],
)
def test_the_settings_still_change_the_workloads_no_operator_touched(
    call, second_app, db, eventually
):
    call("PATCH", "echo", {"max_queued_tasks": 77, "max_tasks_per_job": 7})

    second = second_app.extensions["chunkwise.runtime"]

    assert eventually(1.0, lambda: stored_row(db, "render")["max_queued_tasks"] == 4321)
    assert stored_row(db, "echo")["max_queued_tasks"] == 77
    assert eventually(1.0, lambda: second.workloads.of("render").caps.max_queued_tasks == 4321)
    assert second.workloads.of("echo").caps.max_queued_tasks == 77


@pytest.mark.parametrize("as_", ["user", "worker"])
def test_only_operators_add_change_show_or_remove_workloads(call, as_, db):
    before = db.execute("SELECT * FROM workloads ORDER BY name").fetchall()

    assert call("POST", body={"name": "square"}, as_=as_).status_code == 403
    assert call("PATCH", "echo", {"max_queued_tasks": 5}, as_=as_).status_code == 403
    assert call("DELETE", "render", as_=as_).status_code == 403
    assert call("GET", "echo", as_=as_).status_code == 403
    assert db.execute("SELECT * FROM workloads ORDER BY name").fetchall() == before


def test_the_service_itself_refuses_a_user(rt, user):
    with pytest.raises(Forbidden):
        workload_registry.add_workload(rt, user, "square", {}, trace_id="t" * 32)
    with pytest.raises(Forbidden):
        workload_registry.remove_workload(rt, user, "echo", trace_id="t" * 32)


def test_each_change_is_in_the_audit_log(call, db):
    call("POST", body={"name": "square"})
    call("PATCH", "square", {"max_starts_per_second": 5})
    call("DELETE", "square")

    actions = db.execute(
        "SELECT action FROM audit_log WHERE target = 'square' ORDER BY id"
    ).fetchall()
    assert [a["action"] for a in actions] == ["workload.add", "workload.change", "workload.remove"]


def test_a_second_coordinator_hears_an_added_changed_and_removed_workload_within_a_second(
    call, second_app, tokens, eventually
):
    second = second_app.extensions["chunkwise.runtime"]
    other_client = second_app.test_client()
    user = {"Authorization": f"Bearer {tokens['user']}"}
    assert eventually(1.0, lambda: second.workloads.get("echo") is not None)
    assert second.workloads.get("square") is None

    call("POST", body={"name": "square", "max_tasks_per_job": 4})
    assert eventually(1.0, lambda: second.workloads.get("square") is not None)
    assert other_client.post("/api/v1/jobs", json=square(), headers=user).status_code == 201

    call("PATCH", "square", {"max_tasks_per_job": 2})
    assert eventually(1.0, lambda: second.workloads.of("square").caps.max_tasks_per_job == 2)

    call("PATCH", "echo", {"max_queued_tasks": 99})
    call("DELETE", "echo")
    assert eventually(1.0, lambda: second.workloads.get("echo") is None)
    refused = other_client.post("/api/v1/jobs", json=manifest(1), headers=user)
    assert refused.status_code == 422


def test_csv_stats_lease_caps_may_be_changed_but_not_lifted(call, client, headers):
    lifted = call("PATCH", "csv_stats", {"max_leases_total": None})
    changed = call("PATCH", "csv_stats", {"max_leases_total": 12, "max_queued_tasks": 300})

    assert lifted.status_code == 422
    assert "max_leases_total" in field_errors(lifted)
    assert changed.status_code == 200
    shown = client.get("/api/v1/queue", headers=headers["operator"]).get_json()
    assert (shown["max_leases_total"], shown["max_queued_chunks"]) == (12, 300)


def test_a_csv_stats_job_has_at_most_its_chunks_whatever_the_cap(call):
    response = call("PATCH", "csv_stats", {"max_tasks_per_job": 65})

    assert response.status_code == 422
    assert "max_tasks_per_job" in field_errors(response)


def test_a_process_seeds_once_so_coordinators_with_other_settings_cannot_undo_each_other(rt, db):
    seeds = workload_registry.seed_caps(rt.limits)
    reloader = workload_registry.Reloader(rt.pool, rt.workloads, seeds)
    reloader.reload()
    db.execute("UPDATE workloads SET max_queued_tasks = 999 WHERE name = 'render'")

    reloader.reload()  # what its listener does on every notice and reconnection

    assert stored_row(db, "render")["max_queued_tasks"] == 999
    assert rt.workloads.of("render").caps.max_queued_tasks == 999


def test_a_coordinator_started_before_the_table_existed_seeds_it_at_its_first_reload(rt, db):
    db.execute("DELETE FROM workloads")
    reloader = workload_registry.Reloader(
        rt.pool, rt.workloads, workload_registry.seed_caps(rt.limits)
    )

    reloader.reload()

    assert rt.workloads.names() == ["csv_stats", "echo", "render"]
    assert stored_row(db, "echo")["changed_by"] is None


def test_the_service_itself_refuses_a_cap_it_does_not_know(rt, operator, db):
    with pytest.raises(InvalidInput) as refused:
        workload_registry.add_workload(rt, operator, "square", {"max_cpu": 4}, trace_id="t" * 32)

    assert refused.value.details == {"fields": {"max_cpu": ["Unknown field."]}}
    assert stored_row(db, "square") is None


@pytest.mark.parametrize(
    ("method", "name", "body", "status"),
    [
        ("POST", None, {"name": "square"}, 201),
        ("PATCH", "echo", {"max_queued_tasks_per_user": 7}, 200),
        ("DELETE", "echo", None, 204),
    ],
)
def test_a_committed_change_is_answered_even_when_reading_the_table_back_times_out(
    call, monkeypatch, db, method, name, body, status
):
    def times_out(*args, **kwargs):
        raise PoolTimeout("couldn't get a connection after 30.00 sec")

    monkeypatch.setattr(workload_registry, "refresh", times_out)

    response = call(method, name, body)

    assert response.status_code == status, response.get_json()
    if method == "PATCH":
        assert response.get_json()["max_queued_tasks_per_user"] == 7
        assert stored_row(db, "echo")["max_queued_tasks_per_user"] == 7


def test_a_reload_that_read_the_table_earlier_never_replaces_one_that_read_it_later(
    rt, db, monkeypatch
):
    read, first_read, go_on = workload_rows.served, threading.Event(), threading.Event()

    def served(conn):
        rows = read(conn)
        if not first_read.is_set():  # the first reader stalls between its read and its load
            first_read.set()
            go_on.wait(5)
        return rows

    monkeypatch.setattr(workload_rows, "served", served)
    earlier = threading.Thread(target=workload_registry.refresh, args=(rt.pool, rt.workloads, None))
    earlier.start()
    assert first_read.wait(5)
    db.execute("UPDATE workloads SET max_queued_tasks = 999 WHERE name = 'render'")
    later = threading.Thread(target=workload_registry.refresh, args=(rt.pool, rt.workloads, None))
    later.start()
    later.join(0.5)
    go_on.set()
    earlier.join(5)
    later.join(5)

    assert rt.workloads.of("render").caps.max_queued_tasks == 999


@settings(CHUNKWISE_MAX_QUEUED_CHUNKS="10")
def test_csv_stats_caps_may_be_changed_when_its_queue_holds_fewer_than_a_jobs_chunks(call):
    response = call("PATCH", "csv_stats", {"max_queued_tasks_per_user": 3})

    assert response.status_code == 200, response.get_json()
    assert response.get_json()["max_tasks_per_job"] == 10
