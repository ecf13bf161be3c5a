"""A claim commits without waiting for its WAL flush; what a lost claim leaves is fenced off."""

from __future__ import annotations

import pytest

from tests.integration.manifests import OTHER_WORKER, WORKER, manifest, result_body

CAPPED = {
    "CHUNKWISE_MANIFEST_MAX_LEASES_PER_WORKER": "2",
    "CHUNKWISE_MANIFEST_MAX_LEASES_TOTAL": "8",
}
# Claims of a workload without caps take one statement; with caps, a turn first.
BOTH_PATHS = pytest.mark.parametrize(
    "app_config", [{}, CAPPED], indirect=True, ids=["free", "capped"]
)


def record_commit_settings(db) -> None:
    """Have each commit that opens or closes an attempt record synchronous_commit as the
    commit finds it (a deferred trigger fires at commit, after every statement of it)."""
    db.execute("CREATE TABLE commit_settings (op text, setting text)")
    db.execute(
        """
        CREATE FUNCTION record_commit_setting() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO commit_settings VALUES (TG_OP, current_setting('synchronous_commit'));
            RETURN NULL;
        END $$
        """
    )
    db.execute(
        """
        CREATE CONSTRAINT TRIGGER record_commit_setting
        AFTER INSERT OR UPDATE ON task_attempts DEFERRABLE INITIALLY DEFERRED
        FOR EACH ROW EXECUTE FUNCTION record_commit_setting()
        """
    )


@BOTH_PATHS
def test_a_claim_commits_without_waiting_for_the_flush_and_a_result_waits_for_it(
    submit, claim, complete, db
):
    record_commit_settings(db)
    submit(manifest(1))

    [leased] = claim(WORKER)
    complete(leased)

    rows = db.execute("SELECT op, setting FROM commit_settings").fetchall()
    assert [(r["op"], r["setting"]) for r in rows] == [("INSERT", "off"), ("UPDATE", "on")]


@BOTH_PATHS
def test_a_claim_lost_to_a_database_crash_fences_off_its_worker_and_runs_once_again(
    submit, claim, task_call, job_row, db
):
    job = submit(manifest(1))
    [lost] = claim(WORKER)
    # What a crash before the WAL writer's flush leaves: the claim never happened.
    ids = {"id": lost["task_id"], "job": job["id"]}
    with db.transaction():
        db.execute(
            """
            UPDATE tasks SET status = 'pending', attempt = attempt - 1, lease_owner = NULL,
                lease_expires_at = NULL, heartbeat_at = NULL, started_at = NULL
            WHERE id = %(id)s
            """,
            ids,
        )
        db.execute("DELETE FROM task_attempts WHERE task_id = %(id)s", ids)
        db.execute("UPDATE jobs SET status = 'queued', started_at = NULL WHERE id = %(job)s", ids)

    [again] = claim(OTHER_WORKER)
    lease = {"worker_id": WORKER, "attempt": 1, "lease_token": lost["lease_token"]}
    heartbeat = task_call(lost["task_id"], "heartbeat", lease)
    late = task_call(lost["task_id"], "result", result_body(lost, WORKER))
    done = task_call(again["task_id"], "result", result_body(again, OTHER_WORKER))

    assert again["task_id"] == lost["task_id"] and again["attempt"] == lost["attempt"]
    assert heartbeat.status_code == 409 and late.status_code == 409
    assert done.status_code == 200
    row = job_row(job["id"])
    assert row["status"] == "succeeded" and row["chunks_completed"] == 1
