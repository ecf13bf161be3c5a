"""An operator pauses a workload: no claim leases its tasks until it is resumed."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import replace

import pytest

from app.metrics import QueueCollector
from services import jobs, queue, tasks
from services.errors import Forbidden
from services.wakeups import Wakeups
from tests.integration.manifests import CREDENTIAL, WORKER, manifest


@pytest.fixture
def set_paused(client, headers):
    """POST .../pause or .../resume for a workload as the operator (or `as_`); the response."""

    def post(workload: str, paused: bool = True, as_: str = "operator"):
        action = "pause" if paused else "resume"
        return client.post(f"/api/v1/workloads/{workload}/{action}", headers=headers[as_])

    return post


def test_a_paused_workloads_jobs_are_admitted_but_none_of_its_tasks_is_claimed(
    set_paused, submit, claim, client, headers
):
    assert set_paused("echo").status_code == 200

    job = submit(manifest(2))

    assert job["status"] == "queued"
    assert claim(WORKER, capacity=2) == []
    render = client.post(
        "/api/v1/tasks/claim",
        json={"worker_id": WORKER, "workloads": ["render", "echo"], "capacity": 2},
        headers=headers["worker"],
    )
    assert render.status_code == 204  # render has nothing queued; echo's stay pending


def test_resuming_a_workload_makes_its_pending_tasks_claimable_again(set_paused, submit, claim):
    set_paused("echo")
    submit(manifest(2))

    resumed = set_paused("echo", paused=False)

    assert resumed.status_code == 200
    assert resumed.get_json()["paused"] is False
    assert len(claim(WORKER, capacity=2)) == 2


def test_pausing_one_workload_leaves_anothers_claims_alone(set_paused, submit, client, headers):
    submit({**manifest(1), "workload": "render"})
    set_paused("echo")

    response = client.post(
        "/api/v1/tasks/claim",
        json={"worker_id": WORKER, "workloads": ["echo", "render"], "capacity": 2},
        headers=headers["worker"],
    )

    assert [t["workload"] for t in response.get_json()["tasks"]] == ["render"]


def test_a_task_leased_before_the_pause_still_finishes_and_finishes_its_job(
    set_paused, submit, claim, complete, client, headers
):
    job = submit(manifest(1))
    (leased,) = claim(WORKER)

    set_paused("echo")
    complete(leased)

    finished = client.get(f"/api/v1/jobs/{job['id']}", headers=headers["user"]).get_json()
    assert finished["status"] == "succeeded"


def test_pausing_a_paused_workload_keeps_who_paused_it_first_and_when(
    set_paused, client, headers, db
):
    first = set_paused("echo").get_json()
    again = set_paused("echo").get_json()

    assert again["paused"] is True
    assert (again["paused_by"], again["paused_at"]) == (first["paused_by"], first["paused_at"])
    assert first["paused_by"] == "operator"
    actions = db.execute(
        "SELECT actor, action, target FROM audit_log WHERE action LIKE 'workload.%' ORDER BY id"
    ).fetchall()
    assert [(a["action"], a["target"]) for a in actions] == [("workload.pause", "echo")] * 2


def test_resuming_a_workload_no_one_paused_answers_it_as_it_is(set_paused):
    response = set_paused("echo", paused=False)

    assert response.status_code == 200
    body = response.get_json()
    assert (body["paused"], body["paused_by"], body["paused_at"]) == (False, None, None)


def test_the_workload_list_shows_every_served_workload_with_its_caps_and_pause(
    set_paused, client, headers
):
    set_paused("render")

    listed = client.get("/api/v1/workloads", headers=headers["operator"]).get_json()["workloads"]

    by_name = {w["workload"]: w for w in listed}
    assert sorted(by_name) == ["csv_stats", "echo", "render"]
    assert by_name["render"]["paused"] is True and by_name["echo"]["paused"] is False
    assert by_name["csv_stats"]["max_leases_per_worker"] == 2
    assert by_name["echo"]["max_leases_total"] is None


def test_the_queue_names_paused_workloads_and_does_not_count_their_tasks_as_late(
    set_paused, submit, client, headers
):
    submit(manifest(1))
    time.sleep(0.05)
    late = client.get("/api/v1/queue", headers=headers["operator"]).get_json()
    assert late["oldest_pending_seconds"] > 0

    set_paused("echo")

    paused = client.get("/api/v1/queue", headers=headers["operator"]).get_json()
    assert [p["workload"] for p in paused["paused_workloads"]] == ["echo"]
    assert paused["oldest_pending_seconds"] is None


@pytest.mark.parametrize("as_", ["user", "worker"])
def test_only_operators_pause_resume_or_list_workloads(set_paused, client, headers, as_, db):
    assert set_paused("echo", as_=as_).status_code == 403
    assert set_paused("echo", paused=False, as_=as_).status_code == 403
    assert client.get("/api/v1/workloads", headers=headers[as_]).status_code == 403
    assert db.execute("SELECT count(*) AS n FROM workload_pauses").fetchone()["n"] == 0


def test_the_service_itself_refuses_a_user_who_asks_to_pause(rt, user, db):
    with pytest.raises(Forbidden):
        queue.pause_workload(rt, user, "echo", paused=True, trace_id="t" * 32)

    assert db.execute("SELECT count(*) AS n FROM workload_pauses").fetchone()["n"] == 0


@pytest.mark.parametrize(
    "name", ["nope", "ECHO", "echo%20", "echo%00", "%FF", "caf%C3%A9", "a" * 300]
)
def test_pausing_a_workload_not_served_here_is_404_and_stores_nothing(set_paused, name, db):
    response = set_paused(name)

    assert response.status_code == 404
    assert response.get_json()["error"]["code"] == "not_found"
    assert db.execute("SELECT count(*) AS n FROM workload_pauses").fetchone()["n"] == 0


def test_resuming_wakes_a_claim_already_waiting_for_the_workload(
    rt, operator, set_paused, submit, client, headers
):
    set_paused("echo")
    submit(manifest(1))
    # A second coordinator resumes: its only way to wake us is NOTIFY.
    elsewhere = replace(rt, wakeups=Wakeups(None))
    resumed_at: list[float] = []

    def resume_soon() -> None:
        time.sleep(0.3)
        queue.pause_workload(elsewhere, operator, "echo", paused=False, trace_id="t" * 32)
        resumed_at.append(time.monotonic())

    resumer = threading.Thread(target=resume_soon)
    resumer.start()
    response = client.post(
        "/api/v1/tasks/claim",
        headers=headers["worker"],
        json={"worker_id": WORKER, "workloads": ["echo"], "wait_seconds": 5},
    )
    answered = time.monotonic()
    resumer.join()

    assert response.status_code == 200
    # The claim's own re-check runs once a second; the resume's NOTIFY wakes it well before.
    assert answered - resumed_at[0] < 0.5


def test_no_claim_that_starts_after_the_pause_answered_leases_its_tasks(rt, user, operator):
    for _ in range(4):
        jobs.create_job(rt, user, jobs.JobSpec.from_dict(manifest(100)), trace_id=uuid.uuid4().hex)
    answered = threading.Event()
    claims: list[tuple[bool, int]] = []  # (started after the pause answered, tasks leased)

    def keep_claiming(worker: str) -> None:
        stop_at = None
        while stop_at is None or time.monotonic() < stop_at:
            after = answered.is_set()
            leased = tasks.claim_tasks(rt, worker, ["echo"], capacity=1, credential_id=CREDENTIAL)
            claims.append((after, len(leased)))
            if after and stop_at is None:
                stop_at = time.monotonic() + 0.5

    claimers = [threading.Thread(target=keep_claiming, args=(f"w{n}",)) for n in range(4)]
    for claimer in claimers:
        claimer.start()
    time.sleep(0.3)
    queue.pause_workload(rt, operator, "echo", paused=True, trace_id="t" * 32)
    answered.set()
    for claimer in claimers:
        claimer.join()

    before = [n for after, n in claims if not after]
    after = [n for after, n in claims if after]
    assert sum(before) > 0 and len(after) >= 4  # the race ran: leases before, claims after
    assert sum(after) == 0


def test_metrics_say_which_served_workloads_are_paused(rt, set_paused):
    set_paused("render")

    [family] = [
        f for f in QueueCollector(rt).collect() if f.name == "chunkwise_cluster_workload_paused"
    ]

    paused = {s.labels["workload"]: s.value for s in family.samples}
    assert paused == {"csv_stats": 0, "echo": 0, "render": 1}
