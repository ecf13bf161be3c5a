"""A migration that adds columns, applied while a coordinator runs, leaves its reads working.

Beside the hot paths (test_prepared_statements.py), psycopg prepares any statement a connection
has run five times: a job's view, its chunk, the event feed, a schedule, the workers and the
workloads are read that often by any dashboard. Each names its columns, so PostgreSQL's
`cached plan must not change result type` never comes up on them after `yoyo apply`.
"""

from __future__ import annotations

from services import workload_registry
from tests.integration.manifests import manifest
from tests.integration.test_prepared_statements import ONE_CONNECTION, USES

TABLES = (
    "jobs",
    "tasks",
    "task_attempts",
    "outbox",
    "schedules",
    "workers",
    "workload_pauses",
    "workloads",
)
# A phrase of each read's statement (its spaces collapsed), to see it prepared.
PREPARED = {
    "a job": "FROM jobs WHERE id = $1",
    "a chunk": "FROM tasks WHERE id = $1",
    "its attempts": "FROM task_attempts WHERE task_id = ANY",
    "the event feed": "FROM outbox, mark",
    "a schedule": "FROM schedules s JOIN users u",
    "the workers": "FROM workers w LEFT JOIN tasks t",
    "the pauses": "FROM workload_pauses ORDER BY workload",
    "the workloads": "FROM workloads WHERE removed_at IS NULL ORDER BY name",
}


def read_everything(rt, client, headers, job_id: str, chunk_id: str) -> list[str]:
    """GET each read once, and reload the served workloads as a NOTIFY would; return each
    answer's path and status."""
    workload_registry.refresh(rt.pool, rt.workloads, None)
    reads = [
        ("user", f"/api/v1/jobs/{job_id}"),
        ("user", f"/api/v1/jobs/{job_id}/chunks/{chunk_id}"),
        ("user", "/api/v1/events"),
        ("user", "/api/v1/schedules/nightly"),
        ("operator", "/api/v1/workers"),
        ("operator", "/api/v1/workloads"),
    ]
    return [f"{path} {client.get(path, headers=headers[who]).status_code}" for who, path in reads]


@ONE_CONNECTION
def test_reads_keep_working_after_a_migration_adds_columns_to_the_tables_they_read(
    rt, submit, claim, client, headers, db
):
    job = submit(manifest(1))
    [task] = claim()
    put = client.put(
        "/api/v1/schedules/nightly",
        json={"cron": "0 3 * * *", "job": manifest(1)},
        headers=headers["user"],
    )
    assert put.status_code in (200, 201), put.get_json()
    ids = job["id"], task["task_id"]
    answers = [read_everything(rt, client, headers, *ids) for _ in range(USES)]
    assert all(answer.endswith(" 200") for answer in answers[-1]), answers[-1]
    with rt.pool.connection() as conn:
        prepared = [
            " ".join(r["statement"].split())
            for r in conn.execute("SELECT statement FROM pg_prepared_statements").fetchall()
        ]
    for name, phrase in PREPARED.items():
        assert any(phrase in statement for statement in prepared), f"{name} not prepared"

    for table in TABLES:
        db.execute(f"ALTER TABLE {table} ADD COLUMN extra_for_test int")

    after = read_everything(rt, client, headers, *ids)
    assert after == answers[-1]
