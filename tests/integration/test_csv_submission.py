"""Submitting a CSV job: idempotency, size limit, field validation, labels."""

from __future__ import annotations

import threading

import pytest

from devstack.sample_csv import generate_csv
from tests.integration.csv_worker import (
    files_under,
    get_job,
    row_counts,
    settings,
    submit,
    upload,
)

DATA = generate_csv(40, seed=1)
OTHER_DATA = generate_csv(40, seed=2)


# --- idempotency ------------------------------------------------------------------------------


def test_replaying_a_submission_with_its_idempotency_key_returns_the_same_job_and_writes_nothing(
    client, headers, db, archive_dir
):
    first = upload(client, headers["user"], DATA, key="k-1")
    assert first.status_code == 201
    before, archived = row_counts(db), files_under(archive_dir)

    replay = upload(client, headers["user"], DATA, key="k-1")

    assert replay.status_code == 200
    assert replay.get_json()["id"] == first.get_json()["id"]
    assert row_counts(db) == before
    assert files_under(archive_dir) == archived


def test_reusing_an_idempotency_key_for_a_different_file_is_a_conflict(client, headers, db):
    original = submit(client, headers["user"], DATA, key="k-1")
    before = row_counts(db)

    response = upload(client, headers["user"], OTHER_DATA, key="k-1")

    assert response.status_code == 409
    error = response.get_json()["error"]
    assert error["code"] == "idempotency_conflict"
    assert error["details"]["job_id"] == original["id"]
    assert row_counts(db) == before


@pytest.mark.parametrize(
    "changed",
    [{"chunks": 3}, {"column": "id"}, {"priority": 9}, {"labels": ("team=data",)}],
    ids=["chunks", "column", "priority", "labels"],
)
def test_reusing_an_idempotency_key_with_different_parameters_is_a_conflict(
    client, headers, db, changed
):
    submit(client, headers["user"], DATA, key="k-1")
    before = row_counts(db)

    response = upload(client, headers["user"], DATA, key="k-1", **changed)

    assert response.status_code == 409, response.get_json()
    assert response.get_json()["error"]["code"] == "idempotency_conflict"
    assert row_counts(db) == before


def test_concurrent_submissions_with_one_idempotency_key_create_exactly_one_job(app, headers, db):
    submitters = 8
    barrier = threading.Barrier(submitters)
    responses = []
    lock = threading.Lock()

    def submit_once() -> None:
        client = app.test_client()
        barrier.wait()
        response = upload(client, headers["user"], DATA, key="race")
        with lock:
            responses.append((response.status_code, response.get_json()))

    threads = [threading.Thread(target=submit_once) for _ in range(submitters)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    statuses = sorted(status for status, _ in responses)
    assert statuses == [200] * (submitters - 1) + [201], responses
    assert len({body["id"] for _, body in responses}) == 1
    counts = row_counts(db)
    assert counts["jobs"] == 1
    assert counts["tasks"] == 4
    assert (
        db.execute("SELECT count(*) AS n FROM outbox WHERE event = 'job.created'").fetchone()["n"]
        == 1
    )


def test_idempotency_keys_are_per_user(client, headers, db):
    mine = submit(client, headers["user"], DATA, key="shared-key")

    theirs = upload(client, headers["other"], DATA, key="shared-key")

    assert theirs.status_code == 201
    assert theirs.get_json()["id"] != mine["id"]
    assert row_counts(db)["jobs"] == 2


# --- the size limit ---------------------------------------------------------------------------


@settings(CHUNKWISE_MAX_UPLOAD_BYTES="1000")
@pytest.mark.parametrize(
    "size", [1001, 1000 + 1024 * 1024 + 1], ids=["just-over", "over-the-request-cap"]
)
def test_an_upload_over_the_size_limit_is_413_and_leaves_no_rows_and_no_spool(
    client, headers, db, temp_dir, archive_dir, size
):
    data = generate_csv(size // 10, seed=3)
    data = (data * (size // len(data) + 1))[:size]
    before = row_counts(db)

    response = upload(client, headers["user"], data)

    assert response.status_code == 413
    assert response.get_json()["error"]["code"] == "payload_too_large"
    assert row_counts(db) == before
    assert files_under(temp_dir) == []
    assert files_under(archive_dir) == []


@settings(CHUNKWISE_MAX_UPLOAD_BYTES="1000")
def test_an_upload_of_exactly_the_size_limit_is_accepted(client, headers, temp_dir):
    data = generate_csv(200, seed=3)[:1000]
    data = data[: data.rindex(b"\n") + 1]
    data += b"9" * (1000 - len(data) - 1) + b"\n"  # a last record that pads to the limit
    assert len(data) == 1000

    response = upload(client, headers["user"], data, column="id")

    assert response.status_code == 201, response.get_json()
    assert files_under(temp_dir) == []


# --- field validation -------------------------------------------------------------------------

NO_FILE = object()
BAD_SUBMISSIONS = {
    "missing-file": ("file", NO_FILE, {}),
    "missing-column": ("column", DATA, {"column": None}),
    "column-not-in-header": ("column", DATA, {"column": "price"}),
    "column-found-twice": ("column", b"value,value\n1,2\n", {}),
    "delimiter-quote": ("delimiter", DATA, {"delimiter": '"'}),
    "delimiter-two-chars": ("delimiter", DATA, {"delimiter": ";;"}),
    "chunks-0": ("chunks", DATA, {"chunks": 0}),
    "chunks-65": ("chunks", DATA, {"chunks": 65}),
    "priority-256": ("priority", DATA, {"priority": 256}),
    "not-utf8": ("file", b"id,value\n1,\xff\xfe\n", {}),
    "empty-file": ("file", b"", {}),
    "label-without-equals": ("label", DATA, {"labels": ("team",)}),
}


@pytest.mark.parametrize(
    "field, data, options", BAD_SUBMISSIONS.values(), ids=BAD_SUBMISSIONS.keys()
)
def test_each_bad_field_is_422_naming_it_and_writes_nothing(
    client, headers, db, temp_dir, archive_dir, field, data, options
):
    before = row_counts(db)
    if data is NO_FILE:
        response = client.post(
            "/api/v1/jobs",
            data={"column": "value", "chunks": "2"},
            headers=headers["user"],
            content_type="multipart/form-data",
        )
    else:
        response = upload(client, headers["user"], data, **{"chunks": 2, **options})

    assert response.status_code == 422, response.get_json()
    error = response.get_json()["error"]
    assert error["code"] == "invalid_input"
    assert field in error["details"]["fields"], error
    assert row_counts(db) == before
    assert files_under(temp_dir) == []
    assert files_under(archive_dir) == []


# --- labels -----------------------------------------------------------------------------------


def test_a_label_given_as_text_drops_the_spaces_around_its_key_and_value(client, headers):
    job = submit(client, headers["user"], DATA, labels=(" team = data ", "env=a b"))

    assert job["labels"] == {"team": "data", "env": "a b"}


def test_labels_are_stored_returned_and_filterable(client, headers, db):
    tagged = submit(client, headers["user"], DATA, labels=("team=data", "env=test"))
    submit(client, headers["user"], OTHER_DATA, labels=("team=web",))

    assert tagged["labels"] == {"team": "data", "env": "test"}
    assert get_job(client, headers["user"], tagged["id"])["labels"] == tagged["labels"]
    assert db.execute("SELECT labels FROM jobs WHERE id = %s", (tagged["id"],)).fetchone()[
        "labels"
    ] == {"team": "data", "env": "test"}
    listed = client.get(
        "/api/v1/jobs", query_string={"label": "team=data"}, headers=headers["user"]
    ).get_json()["jobs"]
    assert [j["id"] for j in listed] == [tagged["id"]]
    assert (
        client.get(
            "/api/v1/jobs", query_string={"label": "team=ops"}, headers=headers["user"]
        ).get_json()["jobs"]
        == []
    )
