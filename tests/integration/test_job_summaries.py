"""Lists show each job's summary: its payloads only ever come with the job's own view."""

from __future__ import annotations

from tests.integration.manifests import WORKER, manifest

MIB = 2**20
LARGE = {"blob": "x" * MIB}
# Eleven summaries of a few hundred bytes each, with room to spare: not 11 MiB.
SMALL_LIST_BYTES = 16 * 1024


def test_a_list_of_jobs_with_large_parameters_leaves_them_out_and_stays_small(
    submit, client, headers
):
    submitted = [submit(manifest(1, parameters=LARGE)) for _ in range(11)]

    listed = client.get("/api/v1/jobs", query_string={"limit": 20}, headers=headers["user"])

    assert listed.status_code == 200
    assert len(listed.data) < SMALL_LIST_BYTES, len(listed.data)
    jobs = listed.get_json()["jobs"]
    assert {j["id"] for j in jobs} == {j["id"] for j in submitted}
    assert not {"parameters", "result", "partial_result"} & set().union(*jobs)


def test_the_jobs_own_view_still_has_its_parameters(submit, client, headers):
    job = submit(manifest(1, parameters=LARGE))

    view = client.get(f"/api/v1/jobs/{job['id']}", headers=headers["user"]).get_json()

    assert view["parameters"] == LARGE
    assert "result" in view and "partial_result" in view


def test_the_dashboards_polled_list_leaves_the_parameters_out_too(submit, sign_in):  # noqa: F811
    for _ in range(11):
        submit(manifest(1, parameters=LARGE))
    browser = sign_in("user")

    page, polled = browser.get("/ui/"), browser.get("/ui/jobs.json")

    assert polled.status_code == 200
    assert len(polled.data) < SMALL_LIST_BYTES, len(polled.data)
    assert len(polled.get_json()["jobs"]) == 11
    assert page.status_code == 200 and "xxxxxxxx" not in page.text


def test_a_listed_failed_job_shows_its_errors_code_and_message_but_not_its_details(
    submit, claim, task_call, client, headers
):
    job = submit(manifest(1, max_attempts=1))
    [task] = claim(WORKER)
    task_call(
        task["task_id"],
        "failure",
        {
            "worker_id": WORKER,
            "attempt": 1,
            "lease_token": task["lease_token"],
            "error_code": "boom",
            "error_message": "no",
            "retryable": False,
            "details": {"trace": "y" * MIB},
        },
    )

    [listed] = client.get("/api/v1/jobs", headers=headers["user"]).get_json()["jobs"]
    view = client.get(f"/api/v1/jobs/{job['id']}", headers=headers["user"]).get_json()

    assert listed["status"] == "failed"
    assert listed["error"] == {"code": view["error"]["code"], "message": view["error"]["message"]}
    assert view["error"]["details"]["trace"] == "y" * MIB


def test_the_schedule_list_leaves_out_each_schedules_job_which_its_own_view_has(client, headers):
    for n in range(11):
        body = {"cron": "0 3 * * *", "job": manifest(1, parameters=LARGE)}
        put = client.put(f"/api/v1/schedules/nightly-{n}", json=body, headers=headers["user"])
        assert put.status_code == 201, put.get_json()

    listed = client.get("/api/v1/schedules", headers=headers["user"])
    one = client.get("/api/v1/schedules/nightly-0", headers=headers["user"]).get_json()

    assert len(listed.data) < SMALL_LIST_BYTES, len(listed.data)
    assert len(listed.get_json()["schedules"]) == 11
    assert not any("job" in s for s in listed.get_json()["schedules"])
    assert one["job"]["parameters"] == LARGE


def test_the_chunk_list_leaves_out_checkpoints_metrics_and_error_details_which_a_chunk_has(
    submit, claim, task_call, client, headers
):
    job = submit(manifest(3, max_attempts=1))
    running, failing, _ = claim(WORKER, capacity=3)
    lease = {"worker_id": WORKER, "attempt": 1}
    beat = task_call(
        running["task_id"],
        "heartbeat",
        {**lease, "lease_token": running["lease_token"], "checkpoint": LARGE},
    )
    assert beat.status_code == 200, beat.get_json()
    details = {"trace": "y" * MIB}
    failure = {
        **lease,
        "lease_token": failing["lease_token"],
        "error_code": "boom",
        "error_message": "no",
        "retryable": False,
    }
    task_call(failing["task_id"], "failure", {**failure, "details": details})

    listed = client.get(f"/api/v1/jobs/{job['id']}/chunks", headers=headers["user"])
    chunk_url = f"/api/v1/jobs/{job['id']}/chunks"
    held = client.get(f"{chunk_url}/{running['task_id']}", headers=headers["user"]).get_json()
    failed = client.get(f"{chunk_url}/{failing['task_id']}", headers=headers["user"]).get_json()

    assert listed.status_code == 200
    assert len(listed.data) < SMALL_LIST_BYTES, len(listed.data)
    chunks = {c["id"]: c for c in listed.get_json()["chunks"]}
    assert not {"checkpoint", "metrics"} & set().union(*chunks.values())
    assert chunks[failing["task_id"]]["error"] == {"code": "boom", "message": "no"}
    assert held["checkpoint"] == LARGE
    assert failed["error"]["details"] == details


def test_the_openapi_document_names_the_summaries_the_lists_hold(client, headers):
    document = client.get("/api/v1/openapi.json", headers=headers["user"]).get_json()
    components = document["components"]["schemas"]

    def items(schema: str, field: str) -> dict:
        ref = components[schema]["properties"][field]["items"]["$ref"]
        return components[ref.rsplit("/", 1)[1]]["properties"]

    assert not {"parameters", "result", "partial_result"} & items("JobList", "jobs").keys()
    assert "job" not in items("ScheduleList", "schedules")
    assert not {"metrics", "checkpoint"} & items("ChunkList", "chunks").keys()
    assert {"parameters", "result", "partial_result"} <= components["Job"]["properties"].keys()
