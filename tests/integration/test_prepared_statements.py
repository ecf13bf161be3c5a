"""A migration that adds columns, applied while a coordinator runs, leaves its hot paths working.

The hot statements are prepared on each pooled connection (repositories/__init__.py), and
PostgreSQL refuses a prepared statement whose result type would change (`cached plan must not
change result type`) until the connection goes: `yoyo apply` beside running coordinators
(docs/guides/deploying.md) must not break admissions, claims, heartbeats or results.
"""

from __future__ import annotations

import pytest

from tests.integration.manifests import WORKER, batch_item, manifest

# One connection, so every statement the hot paths prepare is prepared where they run next.
ONE_CONNECTION = pytest.mark.parametrize(
    "app_config",
    [{"CHUNKWISE_DB_POOL_MIN": "1", "CHUNKWISE_DB_POOL_MAX": "1"}],
    indirect=True,
    ids=["one-connection"],
)
# psycopg prepares any other statement (the claim) once a connection has run it five times.
USES = 6
TABLES = ("jobs", "tasks", "task_attempts", "workers", "outbox")
# A phrase of each statement of the hot paths that returns rows.
RETURNING_ROWS = {
    "admission": "INSERT INTO jobs",
    "claim": "FROM leased l",
    "heartbeat batch": "RETURNING t.id, t.lease_expires_at",
    "tasks of a result batch": "FROM tasks WHERE id = ANY",
    # with their attempts and events
    "completions": "UPDATE tasks t SET status = 'completed'",
    "their jobs' counters": "chunks_completed = chunks_completed",
}


def heartbeats(client, headers, leased: list[dict]):
    """POST a heartbeat batch for these claimed tasks."""
    items = [
        {"task_id": t["task_id"], "attempt": t["attempt"], "lease_token": t["lease_token"]}
        for t in leased
    ]
    body = {"worker_id": WORKER, "heartbeats": items}
    return client.post("/api/v1/tasks/heartbeats", json=body, headers=headers["worker"])


def results(client, headers, leased: list[dict]):
    """POST a result batch for these claimed tasks."""
    body = {"worker_id": WORKER, "results": [batch_item(t) for t in leased]}
    return client.post("/api/v1/tasks/results", json=body, headers=headers["worker"])


def run_hot_paths(submit, claim, client, headers, times: int) -> list[dict]:
    """Admit a job, claim its tasks one by one, renew and complete them: `times` times each."""
    job = submit(manifest(times))
    leased = []
    for _ in range(times):
        [task] = claim(WORKER)
        leased.append(task)
        beat = heartbeats(client, headers, [task])
        assert beat.get_json()["results"][0]["outcome"] == "renewed", beat.get_json()
    for task in leased:
        done = results(client, headers, [task])
        assert done.get_json()["results"][0]["outcome"] == "accepted", done.get_json()
    return job


@ONE_CONNECTION
def test_the_hot_paths_keep_working_after_a_migration_adds_columns_beside_them(
    rt, submit, claim, client, headers, db, job_row
):
    run_hot_paths(submit, claim, client, headers, USES)
    with rt.pool.connection() as conn:
        prepared = [
            r["statement"]
            for r in conn.execute("SELECT statement FROM pg_prepared_statements").fetchall()
        ]
    for name, phrase in RETURNING_ROWS.items():
        assert any(phrase in statement for statement in prepared), f"{name} not prepared"

    for table in TABLES:
        db.execute(f"ALTER TABLE {table} ADD COLUMN extra_for_test int")

    job = run_hot_paths(submit, claim, client, headers, USES)
    assert job_row(job["id"])["status"] == "succeeded"
    response = client.get(f"/api/v1/jobs/{job['id']}", headers=headers["user"])
    assert response.status_code == 200
    assert "extra_for_test" not in response.get_json()
