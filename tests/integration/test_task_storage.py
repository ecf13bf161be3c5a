"""The tasks table stays fast as history grows: heartbeats are HOT, claims read pending rows."""

from __future__ import annotations

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


def test_claims_and_admission_read_only_unfinished_rows(db):
    plans = {
        "claim": "SELECT id FROM tasks WHERE status = 'pending' AND workload = ANY('{echo}')"
        " ORDER BY priority DESC, created_at, job_id, chunk_index LIMIT 8",
        "admission": "SELECT count(*) FROM tasks"
        " WHERE status IN ('pending', 'leased') AND workload = 'echo'",
    }
    db.execute("SET enable_seqscan = off")
    for name, query in plans.items():
        plan = "\n".join(r["QUERY PLAN"] for r in db.execute(f"EXPLAIN {query}").fetchall())
        index = "tasks_claim_idx" if name == "claim" else "tasks_unfinished_idx"
        assert index in plan, (name, plan)
