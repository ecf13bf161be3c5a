"""The planner statistics of the tables a queue grows fastest are refreshed once outgrown: by
a job as it is admitted, and by the maintenance pass, so the statements planned after read the
tables by index rather than scanning them whole."""

from __future__ import annotations

import time
import uuid

import psycopg
from psycopg import sql

from repositories import statistics as stat_rows
from services import maintenance, statistics
from services.statistics import MIN_ROWS as REPLAN_AFTER_TASKS
from tests.integration.manifests import manifest


def planned_rows(db, table: str = "tasks") -> float:
    row = db.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", [table]).fetchone()
    return row["reltuples"]


def submit(client, headers, tasks: int) -> None:
    response = client.post("/api/v1/jobs", json=manifest(tasks), headers=headers["user"])
    assert response.status_code == 201, response.get_json()


def test_a_job_into_a_never_analysed_table_refreshes_its_statistics(client, headers, db):
    assert planned_rows(db) == -1  # a new database's tasks table, never analysed
    submit(client, headers, REPLAN_AFTER_TASKS)
    assert planned_rows(db) == REPLAN_AFTER_TASKS


def test_a_job_that_at_least_doubles_the_analysed_table_refreshes_them(client, headers, db):
    submit(client, headers, REPLAN_AFTER_TASKS)
    submit(client, headers, REPLAN_AFTER_TASKS)
    assert planned_rows(db) == 2 * REPLAN_AFTER_TASKS


def test_a_job_smaller_than_the_analysed_table_leaves_them_alone(client, headers, db):
    submit(client, headers, 2 * REPLAN_AFTER_TASKS)
    submit(client, headers, REPLAN_AFTER_TASKS)
    assert planned_rows(db) == 2 * REPLAN_AFTER_TASKS


def test_a_job_below_the_threshold_never_analyses(client, headers, db):
    submit(client, headers, REPLAN_AFTER_TASKS - 1)
    assert planned_rows(db) == -1


def test_a_table_held_by_another_maintenance_pass_is_left_for_it(client, headers, db, database_url):
    # autovacuum holds the lock ANALYZE needs while it works on the table: the admission
    # waits at most its lock timeout, then answers without refreshing anything.
    with psycopg.connect(database_url) as vacuum:
        vacuum.execute("LOCK TABLE tasks IN SHARE UPDATE EXCLUSIVE MODE")
        started = time.monotonic()
        submit(client, headers, REPLAN_AFTER_TASKS)
        waited = time.monotonic() - started
    assert planned_rows(db) == -1
    assert waited < 5


def test_a_plan_kept_from_an_empty_table_is_replanned_by_index_after_the_refresh(
    client, headers, db
):
    # The claim keeps one generic plan per connection (repositories/tasks.py): made while the
    # table was empty, it scans the table whole, and only new statistics make it replan.
    db.execute("SET plan_cache_mode = force_generic_plan")
    db.execute("PREPARE by_ids(uuid[]) AS SELECT id FROM tasks WHERE id = ANY($1)")
    db.execute("EXECUTE by_ids('{}')")
    assert "Seq Scan" in plan_of_prepared(db)
    submit(client, headers, 3 * REPLAN_AFTER_TASKS)
    assert "Seq Scan" not in plan_of_prepared(db)


def plan_of_prepared(db) -> str:
    rows = db.execute("EXPLAIN EXECUTE by_ids('{}')").fetchall()
    return "\n".join(row["QUERY PLAN"] for row in rows)


def record_attempts(db, per_task: int = 1) -> None:
    """One attempt row per task and attempt, then counted at once by the statistics collector."""
    db.execute(
        "INSERT INTO task_attempts (id, task_id, attempt, worker_id, trace_id) "
        "SELECT gen_random_uuid(), t.id, n, 'worker-a', 'trace' "
        "FROM tasks t CROSS JOIN generate_series(1, %s) AS n",
        [per_task],
    )
    db.execute("SELECT pg_stat_force_next_flush()")


def test_the_maintenance_pass_analyses_a_table_that_doubled_since_last_analysed(
    client, headers, db, rt
):
    submit(client, headers, REPLAN_AFTER_TASKS)  # the tasks table analysed as it is admitted
    record_attempts(db)
    maintenance.run_pass(rt)
    assert planned_rows(db, "task_attempts") == REPLAN_AFTER_TASKS
    assert statistics.refresh_outgrown(rt) == []  # analysed: nothing outgrown now


def test_the_maintenance_pass_leaves_a_table_that_has_not_doubled(client, headers, db, rt):
    submit(client, headers, REPLAN_AFTER_TASKS)
    record_attempts(db)
    statistics.refresh_outgrown(rt)
    db.execute("DELETE FROM task_attempts WHERE attempt = 1")
    record_attempts(db)  # as many rows as when analysed: not outgrown
    assert statistics.refresh_outgrown(rt) == []


def test_the_maintenance_pass_leaves_small_tables_alone(client, headers, db, rt):
    submit(client, headers, REPLAN_AFTER_TASKS - 1)
    record_attempts(db)
    assert statistics.refresh_outgrown(rt) == []
    assert planned_rows(db, "task_attempts") == -1


def test_a_role_that_does_not_own_the_tables_leaves_them_to_autovacuum(
    client, headers, db, rt, database_url
):
    submit(client, headers, REPLAN_AFTER_TASKS - 1)
    record_attempts(db, per_task=2)
    reader = f"chunkwise_reader_{uuid.uuid4().hex[:12]}"  # roles are the whole server's
    db.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(reader)))
    try:
        with psycopg.connect(database_url, row_factory=psycopg.rows.dict_row) as conn:
            conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(reader)))
            sizes = stat_rows.sizes(conn)
        assert [s.analysable for s in sizes] == [False, False]
        assert not any(statistics.outgrown(s) for s in sizes)
    finally:
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(reader)))


def test_a_failed_analysis_after_an_admission_still_answers_the_admitted_job(
    client, headers, db, monkeypatch, caplog
):
    def broken(*args) -> bool:
        raise psycopg.errors.InternalError("the sample could not be read")

    monkeypatch.setattr(stat_rows, "analyze", broken)
    submit(client, headers, REPLAN_AFTER_TASKS)  # asserts the 201
    assert db.execute("SELECT count(*) AS n FROM tasks").fetchone()["n"] == REPLAN_AFTER_TASKS
    assert any(getattr(r, "event", None) == "analyse_error" for r in caplog.records)
