"""A CSV job sent as the text/csv body: the multipart form's validation, limits and keys."""

from __future__ import annotations

import pytest

from devstack.sample_csv import generate_csv, generate_quoted_csv
from tests.integration.csv_worker import (
    files_under,
    get_job,
    row_counts,
    settings,
    upload,
    upload_body,
)
from tests.integration.test_csv_submission import BAD_SUBMISSIONS, NO_FILE

DATA = generate_csv(40, seed=1)


def test_a_raw_body_makes_the_job_a_form_would_with_its_chunks_and_labels(client, headers, db):
    data = generate_quoted_csv(300, seed=4)

    response = upload_body(client, headers["user"], data, chunks=3, labels=("team=data",))

    assert response.status_code == 201, response.get_json()
    job = get_job(client, headers["user"], response.get_json()["id"])
    assert job["chunks_total"] == 3
    assert job["labels"] == {"team": "data"}
    plans = db.execute(
        "SELECT parameters FROM tasks WHERE job_id = %s ORDER BY chunk_index", (job["id"],)
    ).fetchall()
    assert [p["parameters"]["record_start"] for p in plans] == [0, 100, 200]


def test_an_idempotency_key_matches_the_same_submission_sent_either_way(
    client, headers, db, archive_dir
):
    first = upload(client, headers["user"], DATA, key="k-raw")
    assert first.status_code == 201
    before, archived = row_counts(db), files_under(archive_dir)

    replay = upload_body(client, headers["user"], DATA, key="k-raw")

    assert replay.status_code == 200
    assert replay.get_json()["id"] == first.get_json()["id"]
    assert row_counts(db) == before
    assert files_under(archive_dir) == archived
    other = upload_body(client, headers["user"], DATA, key="k-raw", chunks=2)
    assert other.status_code == 409
    assert other.get_json()["error"]["code"] == "idempotency_conflict"


def test_a_duplicate_uploads_spool_is_removed_once_its_answer_is_sent_not_before(
    client, headers, temp_dir
):
    assert upload_body(client, headers["user"], DATA).status_code == 201  # the spool archived
    # The same bytes again: nothing to archive, so this spool is deleted, after the answer.
    response = client.post(
        "/api/v1/jobs",
        data=DATA,
        query_string={"column": "value", "chunks": "4"},
        headers=headers["user"],
        content_type="text/csv",
        buffered=False,  # the response left open, as a server holds it while sending it
    )

    assert response.status_code == 201
    assert len(files_under(temp_dir)) == 1
    response.close()
    assert files_under(temp_dir) == []


def test_a_spool_is_removed_even_when_a_hook_after_the_view_fails_the_request(
    app, client, headers, temp_dir
):
    assert upload_body(client, headers["user"], DATA).status_code == 201  # the spool archived

    def fail(response):
        raise RuntimeError("a hook failed")

    # Run after every other hook, the uploads' one included (they run last added first).
    app.after_request_funcs.setdefault(None, []).insert(0, fail)
    with pytest.raises(RuntimeError, match="a hook failed"):
        upload_body(client, headers["user"], DATA)  # a duplicate: its spool is to be deleted

    assert files_under(temp_dir) == []


@settings(CHUNKWISE_MAX_UPLOAD_BYTES="1000")
@pytest.mark.parametrize(
    "size", [1001, 1000 + 1024 * 1024 + 1], ids=["just-over", "over-the-request-cap"]
)
def test_a_body_over_the_size_limit_is_413_and_leaves_no_rows_and_no_spool(
    client, headers, db, temp_dir, archive_dir, size
):
    data = (DATA * (size // len(DATA) + 1))[:size]
    before = row_counts(db)

    response = upload_body(client, headers["user"], data)

    assert response.status_code == 413
    assert response.get_json()["error"]["code"] == "payload_too_large"
    assert row_counts(db) == before
    assert files_under(temp_dir) == []
    assert files_under(archive_dir) == []


@settings(CHUNKWISE_MAX_UPLOAD_BYTES="1000")
def test_a_body_of_exactly_the_size_limit_is_accepted(client, headers, temp_dir):
    data = DATA[: DATA.rindex(b"\n", 0, 1000) + 1]
    data += b"9" * (1000 - len(data) - 1) + b"\n"
    assert len(data) == 1000

    response = upload_body(client, headers["user"], data, column="id")

    assert response.status_code == 201, response.get_json()
    assert files_under(temp_dir) == []


RAW_BAD_SUBMISSIONS = {
    name: case for name, case in BAD_SUBMISSIONS.items() if case[1] is not NO_FILE
}


@pytest.mark.parametrize(
    "field, data, options", RAW_BAD_SUBMISSIONS.values(), ids=RAW_BAD_SUBMISSIONS.keys()
)
def test_each_bad_parameter_or_file_is_422_naming_it_and_writes_nothing(
    client, headers, db, temp_dir, archive_dir, field, data, options
):
    before = row_counts(db)
    options = {**options}
    labels = options.pop("labels", ())

    response = upload_body(client, headers["user"], data, labels=labels, **{"chunks": 2, **options})

    assert response.status_code == 422, response.get_json()
    error = response.get_json()["error"]
    assert error["code"] == "invalid_input"
    assert field in error["details"]["fields"], error
    assert row_counts(db) == before
    assert files_under(temp_dir) == []
    assert files_under(archive_dir) == []


def test_an_unknown_query_parameter_is_422(client, headers, db):
    before = row_counts(db)

    response = upload_body(client, headers["user"], DATA, colum="value")

    assert response.status_code == 422
    assert "colum" in response.get_json()["error"]["details"]["fields"]
    assert row_counts(db) == before


@settings(CHUNKWISE_MAX_QUEUED_CHUNKS="4")
def test_a_body_that_would_overfill_the_queue_is_429_and_stores_nothing(
    client, headers, db, archive_dir
):
    assert upload_body(client, headers["user"], DATA, chunks=4).status_code == 201
    before, archived = row_counts(db), files_under(archive_dir)

    response = upload_body(client, headers["user"], generate_csv(40, seed=2), chunks=1)

    assert response.status_code == 429
    assert response.headers["Retry-After"].isdigit()
    assert row_counts(db) == before
    assert files_under(archive_dir) == archived
