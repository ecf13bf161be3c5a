"""The tasks table's planner statistics are refreshed by a job that outgrows them, so the
claims planned after it read the table by index rather than scanning it whole."""

from __future__ import annotations

import time

import psycopg

from services.jobs import REPLAN_AFTER_TASKS
from tests.integration.manifests import manifest


def planned_rows(db) -> float:
    return db.execute("SELECT reltuples FROM pg_class WHERE oid = 'tasks'::regclass").fetchone()[
        "reltuples"
    ]


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
