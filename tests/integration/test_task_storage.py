"""The tasks table stays fast as history grows: heartbeats are HOT, claims read pending rows."""

from __future__ import annotations

import pytest

from repositories import tasks as task_rows

# What a heartbeat writes (repositories.tasks.renew).
HEARTBEAT_COLUMNS = {"lease_expires_at", "heartbeat_at", "checkpoint", "version"}


def test_no_index_covers_a_column_heartbeats_write(db):
    # An update that changes no indexed column can be HOT: no new index entries at all.
    rows = db.execute(
        """
        SELECT i.indexrelid::regclass::text AS index, a.attname AS column
        FROM pg_index i
        JOIN pg_attribute a ON a.attrelid = i.indrelid
        WHERE i.indrelid = 'tasks'::regclass
          AND (a.attnum = ANY(i.indkey)
               OR pg_get_expr(i.indpred, i.indrelid) LIKE '%%' || a.attname || '%%')
        """
    ).fetchall()
    assert not {r["column"] for r in rows} & HEARTBEAT_COLUMNS, rows


def test_the_tasks_table_leaves_room_on_each_page_for_updated_rows(db):
    options = db.execute("SELECT reloptions FROM pg_class WHERE relname = 'tasks'").fetchone()
    assert "fillfactor=80" in options["reloptions"]


@pytest.fixture
def plans(db):
    """The plans of the statements `db` ran since the last call, from auto_explain."""
    db.execute("LOAD 'auto_explain'")
    db.execute("SET auto_explain.log_min_duration = 0")
    db.execute("SET auto_explain.log_level = notice")
    seen: list[str] = []
    db.add_notice_handler(lambda diag: seen.append(diag.message_primary or ""))

    def taken() -> str:
        text = "\n".join(seen)
        seen.clear()
        return text

    return taken


@pytest.fixture
def stale_queue(db) -> None:
    """A million-task queue in miniature: statistics taken over finished tasks only, then
    3,000 tasks queued that ANALYZE has not seen (a queue's statistics are always behind)."""
    owner = db.execute("INSERT INTO users (name, role) VALUES ('u', 'user') RETURNING id")
    owner_id = owner.fetchone()["id"]
    # Served, or the recount below has nothing to count for.
    db.execute(
        "INSERT INTO workloads (name, max_queued_tasks, max_tasks_per_job)"
        " VALUES ('echo', 5000, 5000)"
    )
    for status, count in (("completed", 2000), ("pending", 3000)):
        job = db.execute(
            """
            INSERT INTO jobs (id, owner_id, workload, input_uri, chunks_total, trace_id)
            VALUES (gen_random_uuid(), %s, 'echo', 's3://in', %s, 't') RETURNING id
            """,
            (owner_id, count),
        ).fetchone()["id"]
        db.execute(
            """
            INSERT INTO tasks (id, job_id, chunk_index, workload, priority, input_uri,
                               input_sha256, max_attempts, status, result_uri, result_sha256)
            SELECT gen_random_uuid(), %(job)s, i, 'echo', 0, 's3://in', %(sha)s, 3, %(status)s,
                   CASE WHEN %(status)s = 'completed' THEN 's3://out' END,
                   CASE WHEN %(status)s = 'completed' THEN %(sha)s END
            FROM generate_series(0, %(count)s - 1) AS i
            """,
            {"job": job, "sha": "a" * 64, "status": status, "count": count},
        )
        if status == "completed":
            db.execute("ANALYZE tasks")


def test_claims_results_and_admission_keep_to_their_indexes_when_statistics_are_stale(
    db, plans, stale_queue
):
    claimed = task_rows.claim(
        db,
        worker_id="w",
        credential_id=1,
        workloads=["echo"],
        named=["echo"],
        capacity=10,
        max_per_worker=None,
        max_total=None,
        lease_seconds=30,
    )
    claim_plan = plans()
    outcomes = [
        task_rows.Outcome(c.task.id, c.task.attempt, c.lease_token, "s3://out", "a" * 64, {})
        for c in claimed
    ]
    assert len(task_rows.complete_many(db, "w", 1, outcomes)) == 10
    results_plan = plans()
    assert task_rows.recount_unfinished(db, "echo") == 2990
    admission_plan = plans()

    # Each reads the few rows it needs in index order: no scan or sort of the whole queue.
    assert "Index Scan using tasks_ready_idx" in claim_plan, claim_plan
    assert "Index Scan using tasks_waiting_idx" in claim_plan, claim_plan
    assert "Sort Key: t.priority" not in claim_plan, claim_plan
    assert "tasks_lease_owner_idx" in results_plan or "tasks_pkey" in results_plan, results_plan
    assert "tasks_ready_idx" in admission_plan, admission_plan
    assert "tasks_waiting_idx" in admission_plan, admission_plan
    for plan in (claim_plan, results_plan, admission_plan):
        assert "Seq Scan on tasks" not in plan, plan
