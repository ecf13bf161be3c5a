"""The yoyo migrations against a real server, and /readyz telling a behind schema apart."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.rows import dict_row

from app import create_app, migrations
from app.runtime import close
from repositories import events as event_rows
from tests.integration.queue_counts import counted, tallied

QUEUE_TABLES = {
    "users",
    "api_tokens",
    "jobs",
    "tasks",
    "task_attempts",
    "workers",
    "outbox",
    "audit_log",
    "queue_bounds",
    "tallies",
    "job_tallies",
}
CSV_TABLES = {"chunk_summaries"}
LATEST = "0032.freed_leases_under_caps"
# What the latest migration's function says that sql/0015's did not.
CAPPED_ONLY = "max_leases_per_worker IS NOT NULL"
# The table and trigger 0031 adds.
WORKLOADS, WORKLOADS_TABLE, WORKLOADS_TRIGGER = (
    "0031.workloads",
    "workloads",
    "workloads_announce_change",
)
# The table and the tasks' column 0030 adds.
RESULTS_TABLE, ARGS_COLUMN = "task_results", "args"
# The table 0029 adds.
COORDINATORS_TABLE = "coordinators"
# The table and the tasks' column 0028 adds.
USER_BOUNDS_TABLE, FAIR_COLUMN = "user_bounds", "fair_tag"
# The table 0027 adds.
SESSIONS_TABLE = "ui_sessions"
# The table 0025 adds.
BUCKETS_TABLE = "workload_buckets"
# The columns 0026 adds, by table.
LEASE_COLUMNS = {
    "tasks": "lease_sha256",
    "task_attempts": "lease_sha256",
    "workers": "credential_id",
}
# The table 0024 adds.
PAUSES_TABLE = "workload_pauses"
# The column 0023 adds to jobs, and its index, built outside a transaction.
DEPENDENCY_COLUMN, DEPENDENTS_INDEX = "depends_on", "jobs_dependents_idx"
# The table 0022 adds.
SCHEDULES_TABLE = "schedules"
# The tables 0022 and later add.
LATER_TABLES = {
    SCHEDULES_TABLE,
    PAUSES_TABLE,
    BUCKETS_TABLE,
    SESSIONS_TABLE,
    USER_BOUNDS_TABLE,
    COORDINATORS_TABLE,
    RESULTS_TABLE,
    WORKLOADS_TABLE,
}
HEAD_TABLES = QUEUE_TABLES | CSV_TABLES | LATER_TABLES
# The columns 0021 adds, by table.
TIMEOUT_COLUMNS = {"jobs": {"timeout_seconds"}, "tasks": {"timeout_seconds", "deadline"}}
# The column 0019 adds to tasks, and the claim index it splits in two.
RETRY_COLUMN = "not_before"
RETRY_INDEXES, CLAIM_INDEX = {"tasks_ready_idx", "tasks_waiting_idx"}, "tasks_claim_idx"
# The column 0018 adds to the outbox, and the indexes it swaps, outside a transaction.
FEED_COLUMN = "xact"
FEED_INDEXES = {"outbox_feed_idx", "outbox_owner_feed_idx", "outbox_job_feed_idx"}
FEED_REPLACED = {"outbox_owner_idx", "outbox_job_idx"}
# The indexes 0017 builds, outside a transaction.
WORKLOAD_INDEXES = {"jobs_workload_created_idx", "jobs_owner_workload_created_idx"}
# The table and triggers 0016 adds.
JOB_TALLIES_TABLE = "job_tallies"
JOB_TALLY_TRIGGERS = {
    "tasks_job_tally_inserts",
    "tasks_job_tally_updates",
    "tasks_job_tally_deletes",
    "tasks_job_tally_truncate",
}
# The trigger functions 0015 rewrites, which joined their transition tables.
LINEAR_FUNCTIONS = {
    "chunkwise_announce_task_changes",
    "chunkwise_tally_tasks",
    "chunkwise_tally_attempts",
}
# The index 0014 builds, outside a transaction.
EVENTS_INDEX = "outbox_job_idx"
# The indexes 0013 builds, outside a transaction too.
LISTING_INDEXES = {"jobs_owner_status_created_idx", "jobs_status_created_idx", "jobs_labels_idx"}
# The column 0012 adds.
ATTEMPTS_COLUMN = "max_attempts"
# The column 0011 adds, and its index.
STRAY_COLUMN, STRAY_INDEX = "stray_tasks", "jobs_stray_tasks_idx"
# The table and triggers 0010 adds.
TALLIES_TABLE = "tallies"
TALLY_TRIGGERS = {
    "tasks_tally_inserts",
    "tasks_tally_updates",
    "tasks_tally_deletes",
    "task_attempts_tally_inserts",
    "task_attempts_tally_updates",
    "task_attempts_tally_deletes",
    "jobs_tally_inserts_and_deletes",
    "jobs_tally_status",
    "tasks_tally_truncate",
    "task_attempts_tally_truncate",
    "jobs_tally_truncate",
}
# The triggers 0009 adds.
CREDENTIAL_TRIGGERS = {"api_tokens_announce_change", "users_announce_change"}
TRIGGERS = {
    "jobs_announce_change",
    "tasks_announce_new_claimable",
    "tasks_announce_changes",
    *CREDENTIAL_TRIGGERS,
    *TALLY_TRIGGERS,
    *JOB_TALLY_TRIGGERS,
}
# The row triggers 0006 replaced with one statement trigger, back after its rollback.
ROW_TRIGGERS = {"tasks_announce_change", "tasks_announce_claimable_change"}
STORAGE_INDEXES = {"jobs_finished_idx"}
# The table 0008 adds.
BOUNDS_TABLE = "queue_bounds"
# The index 0007 dropped, back after its rollback.
TRAP_INDEX = "tasks_unfinished_idx"
# A finished job and a failed one, whose task lost a lease before it failed for good.
HISTORY = """
    INSERT INTO users (name, role) VALUES ('old', 'user');
    INSERT INTO jobs (id, owner_id, workload, input_uri, status, chunks_total, trace_id)
    VALUES ('00000000-0000-0000-0000-00000000000a', 1, 'echo', 's3://in/', 'succeeded', 1, 't'),
           ('00000000-0000-0000-0000-00000000000b', 1, 'echo', 's3://in/', 'failed', 1, 't');
    INSERT INTO tasks (id, job_id, chunk_index, workload, priority, input_uri, input_sha256,
                       max_attempts, status, attempt, result_uri, result_sha256, error_code)
    VALUES ('00000000-0000-0000-0000-0000000000a1', '00000000-0000-0000-0000-00000000000a', 0,
            'echo', 0, 's3://in/0', 'x', 3, 'completed', 1, 's3://out/0', 'y', NULL),
           ('00000000-0000-0000-0000-0000000000b1', '00000000-0000-0000-0000-00000000000b', 0,
            'echo', 0, 's3://in/0', 'x', 3, 'failed', 2, NULL, NULL, 'bad_format');
    INSERT INTO task_attempts (id, task_id, attempt, worker_id, trace_id, outcome, error_code)
    VALUES (gen_random_uuid(), '00000000-0000-0000-0000-0000000000a1', 1, 'w', 't',
            'completed', NULL),
           (gen_random_uuid(), '00000000-0000-0000-0000-0000000000b1', 1, 'w', 't',
            'lease_expired', 'lease_expired'),
           (gen_random_uuid(), '00000000-0000-0000-0000-0000000000b1', 2, 'w', 't',
            'failed', 'bad_format');
"""


def public_tables(url: str) -> set[str]:
    """Names of the ordinary tables in the public schema (yoyo's bookkeeping excluded)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
        ).fetchall()
    return {name for (name,) in rows if not name.startswith("_yoyo") and name != "yoyo_lock"}


def triggers(url: str) -> set[str]:
    """Names of the triggers on the public schema's tables."""
    with psycopg.connect(url) as conn:
        # pg_trigger, not information_schema.triggers, which leaves out TRUNCATE triggers.
        rows = conn.execute(
            "SELECT t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
            " WHERE c.relnamespace = 'public'::regnamespace AND NOT t.tgisinternal"
        ).fetchall()
    return {name for (name,) in rows}


def indexes(url: str) -> set[str]:
    """Names of the indexes on the public schema's tables."""
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")
        return {name for (name,) in rows.fetchall()}


def has_timeout_columns(url: str) -> dict[str, bool]:
    """Whether each table 0021 changes has all of its columns (False: none of them)."""
    found = {table: wanted & columns(url, table) for table, wanted in TIMEOUT_COLUMNS.items()}
    assert all(f in (set(), TIMEOUT_COLUMNS[t]) for t, f in found.items()), found
    return {table: bool(f) for table, f in found.items()}


def columns(url: str, table: str) -> set[str]:
    """Names of a public table's columns."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = 'public' AND table_name = %s",
            (table,),
        ).fetchall()
    return {name for (name,) in rows}


def functions_joining_transition_tables(url: str) -> set[str]:
    """Names of the public functions whose body joins old_rows and new_rows."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace"
            " AND prosrc ~ '(old_rows|new_rows) \\w+ JOIN (old_rows|new_rows)'"
        ).fetchall()
    return {name for (name,) in rows}


def roll_back_through(url: str, migration: str) -> None:
    """Roll back the latest migrations, one at a time, until `migration` is undone as well."""
    ids = migrations.migration_ids()
    for _ in ids[ids.index(migration) :]:
        migrations.rollback_latest(url)


def test_the_latest_migration_is_the_one_these_tests_roll_back():
    assert migrations.migration_ids()[-1] == LATEST


def test_empty_database_upgrades_to_head_rolls_back_the_latest_and_reapplies(empty_database_url):
    assert public_tables(empty_database_url) == set()

    migrations.apply(empty_database_url)
    assert public_tables(empty_database_url) == HEAD_TABLES
    assert triggers(empty_database_url) == TRIGGERS | {WORKLOADS_TRIGGER}
    assert indexes(empty_database_url) >= STORAGE_INDEXES
    assert not {"tasks_leased_idx", TRAP_INDEX} & indexes(empty_database_url)

    assert not functions_joining_transition_tables(empty_database_url)

    assert indexes(empty_database_url) >= RETRY_INDEXES | FEED_INDEXES | {DEPENDENTS_INDEX}
    assert has_timeout_columns(empty_database_url) == {"jobs": True, "tasks": True}
    assert DEPENDENCY_COLUMN in columns(empty_database_url, "jobs")

    assert all(c in columns(empty_database_url, t) for t, c in LEASE_COLUMNS.items())
    assert FAIR_COLUMN in columns(empty_database_url, "tasks")
    assert ARGS_COLUMN in columns(empty_database_url, "tasks")

    assert CAPPED_ONLY in task_announcer(empty_database_url)

    migrations.rollback_latest(empty_database_url)
    assert public_tables(empty_database_url) == HEAD_TABLES
    assert CAPPED_ONLY not in task_announcer(empty_database_url)

    migrations.apply(empty_database_url)
    assert public_tables(empty_database_url) == HEAD_TABLES
    assert triggers(empty_database_url) == TRIGGERS | {WORKLOADS_TRIGGER}
    assert CAPPED_ONLY in task_announcer(empty_database_url)


def task_announcer(url: str) -> str:
    """The source of the function the tasks' statement trigger announces changes with."""
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT prosrc FROM pg_proc WHERE proname = 'chunkwise_announce_task_changes'"
        ).fetchone()[0]


def test_rolling_back_the_workloads_migration_drops_its_table_trigger_and_function(
    empty_database_url,
):
    migrations.apply(empty_database_url)

    roll_back_through(empty_database_url, WORKLOADS)

    assert public_tables(empty_database_url) == HEAD_TABLES - {WORKLOADS_TABLE}
    assert triggers(empty_database_url) == TRIGGERS
    with psycopg.connect(empty_database_url) as conn:
        announcer = conn.execute(
            "SELECT count(*) FROM pg_proc WHERE proname = 'chunkwise_announce_workloads_change'"
        ).fetchone()[0]
    assert announcer == 0


def test_rolling_back_the_task_values_migration_drops_its_table_and_column(empty_database_url):
    migrations.apply(empty_database_url)

    roll_back_through(empty_database_url, "0030.task_values")

    assert public_tables(empty_database_url) == HEAD_TABLES - {WORKLOADS_TABLE, RESULTS_TABLE}
    assert ARGS_COLUMN not in columns(empty_database_url, "tasks")


def test_rolling_back_the_workload_rates_migration_drops_its_table(empty_database_url):
    migrations.apply(empty_database_url)

    roll_back_through(empty_database_url, "0025.workload_rates")

    assert public_tables(empty_database_url) == HEAD_TABLES - {
        RESULTS_TABLE,
        BUCKETS_TABLE,
        SESSIONS_TABLE,
        USER_BOUNDS_TABLE,
        COORDINATORS_TABLE,
        WORKLOADS_TABLE,
    }


def test_rolling_back_the_fair_share_migration_drops_its_table_and_column(empty_database_url):
    migrations.apply(empty_database_url)

    roll_back_through(empty_database_url, "0028.fair_share")

    assert public_tables(empty_database_url) == HEAD_TABLES - {
        RESULTS_TABLE,
        USER_BOUNDS_TABLE,
        COORDINATORS_TABLE,
        WORKLOADS_TABLE,
    }
    assert FAIR_COLUMN not in columns(empty_database_url, "tasks")
    assert indexes(empty_database_url) >= RETRY_INDEXES  # the claim index, as 0019 built it


def test_rolling_back_the_lease_tokens_migration_drops_its_columns(empty_database_url):
    migrations.apply(empty_database_url)

    roll_back_through(empty_database_url, "0026.lease_tokens")

    assert not any(c in columns(empty_database_url, t) for t, c in LEASE_COLUMNS.items())
    assert public_tables(empty_database_url) == HEAD_TABLES - {
        RESULTS_TABLE,
        SESSIONS_TABLE,
        USER_BOUNDS_TABLE,
        COORDINATORS_TABLE,
        WORKLOADS_TABLE,
    }  # 0025's stays


def test_rolling_back_the_workload_pauses_migration_drops_its_table(empty_database_url):
    migrations.apply(empty_database_url)

    roll_back_through(empty_database_url, "0024.workload_pauses")

    assert public_tables(empty_database_url) == HEAD_TABLES - {
        RESULTS_TABLE,
        PAUSES_TABLE,
        BUCKETS_TABLE,
        SESSIONS_TABLE,
        USER_BOUNDS_TABLE,
        COORDINATORS_TABLE,
        WORKLOADS_TABLE,
    }
    assert DEPENDENCY_COLUMN in columns(empty_database_url, "jobs")  # 0023's stays


def test_rolling_back_the_job_dependencies_migration_drops_its_column_and_index(
    empty_database_url,
):
    migrations.apply(empty_database_url)

    roll_back_through(empty_database_url, "0023.job_dependencies")

    assert DEPENDENCY_COLUMN not in columns(empty_database_url, "jobs")
    assert DEPENDENTS_INDEX not in indexes(empty_database_url)
    assert SCHEDULES_TABLE in public_tables(empty_database_url)  # 0022's stays


def test_rolling_back_the_schedules_migration_drops_its_table(empty_database_url):
    migrations.apply(empty_database_url)

    roll_back_through(empty_database_url, "0022.schedules")

    assert public_tables(empty_database_url) == QUEUE_TABLES | CSV_TABLES
    assert has_timeout_columns(empty_database_url) == {"jobs": True, "tasks": True}  # 0021's stay


def test_rolling_back_the_task_timeouts_migration_drops_its_columns(empty_database_url):
    migrations.apply(empty_database_url)

    roll_back_through(empty_database_url, "0021.task_timeouts")

    assert has_timeout_columns(empty_database_url) == {"jobs": False, "tasks": False}
    assert "not_before" in columns(empty_database_url, "jobs")  # 0020's stays


def test_rolling_back_the_retry_delays_migration_restores_the_one_claim_index(
    empty_database_url,
):
    migrations.apply(empty_database_url)
    assert CLAIM_INDEX not in indexes(empty_database_url)

    roll_back_through(empty_database_url, "0019.task_retry_delays")

    assert not RETRY_INDEXES & indexes(empty_database_url)
    assert CLAIM_INDEX in indexes(empty_database_url)
    assert RETRY_COLUMN not in columns(empty_database_url, "tasks")


def test_rolling_back_the_feed_order_migration_restores_the_outbox_as_it_was(
    empty_database_url,
):
    migrations.apply(empty_database_url)
    assert indexes(empty_database_url) >= FEED_INDEXES
    assert not FEED_REPLACED & indexes(empty_database_url)

    roll_back_through(empty_database_url, "0018.events_in_feed_order")

    assert not FEED_INDEXES & indexes(empty_database_url)
    assert indexes(empty_database_url) >= FEED_REPLACED
    assert FEED_COLUMN not in columns(empty_database_url, "outbox")


def test_the_feed_order_migration_puts_the_events_already_there_first(empty_database_url):
    migrations.apply(empty_database_url)
    roll_back_through(empty_database_url, "0018.events_in_feed_order")
    with psycopg.connect(empty_database_url, autocommit=True, row_factory=dict_row) as conn:
        conn.execute(HISTORY)
        conn.execute(
            "INSERT INTO outbox (job_id, owner_id, event, trace_id)"
            " SELECT id, owner_id, 'job.succeeded', 'old' FROM jobs ORDER BY id"
        )

    migrations.apply(empty_database_url)

    with psycopg.connect(empty_database_url, autocommit=True, row_factory=dict_row) as conn:
        conn.execute(
            "INSERT INTO outbox (job_id, owner_id, event, trace_id)"
            " SELECT id, owner_id, 'job.retried', 'new' FROM jobs ORDER BY id LIMIT 1"
        )
        feed = event_rows.list_events(conn, owner_id=None, after=0, limit=10).events
    assert [(e.event, e.trace_id) for e in feed] == [
        ("job.succeeded", "old"),
        ("job.succeeded", "old"),
        ("job.retried", "new"),
    ]


def test_rolling_back_the_workload_listing_migration_drops_its_indexes(empty_database_url):
    migrations.apply(empty_database_url)
    assert indexes(empty_database_url) >= WORKLOAD_INDEXES

    roll_back_through(empty_database_url, "0017.job_workload_listing")

    assert not WORKLOAD_INDEXES & indexes(empty_database_url)


def test_rolling_back_the_job_tallies_migration_drops_its_table_and_triggers(empty_database_url):
    migrations.apply(empty_database_url)

    roll_back_through(empty_database_url, "0016.job_tallies")

    assert public_tables(empty_database_url) == QUEUE_TABLES - {JOB_TALLIES_TABLE} | CSV_TABLES
    assert triggers(empty_database_url) == TRIGGERS - JOB_TALLY_TRIGGERS


def test_the_job_tallies_migration_counts_the_tasks_already_there(empty_database_url):
    migrations.apply(empty_database_url)
    with psycopg.connect(empty_database_url, autocommit=True, row_factory=dict_row) as conn:
        conn.execute(HISTORY)
    roll_back_through(empty_database_url, "0016.job_tallies")

    migrations.apply(empty_database_url)

    with psycopg.connect(empty_database_url, row_factory=dict_row) as conn:
        by_job = tallied(conn)["by_job"]
        assert by_job == counted(conn)["by_job"]
    assert by_job == [
        ("00000000-0000-0000-0000-00000000000a", "completed", 1),
        ("00000000-0000-0000-0000-00000000000b", "failed", 1),
    ]


def test_rolling_back_the_linear_triggers_migration_restores_the_joins(empty_database_url):
    migrations.apply(empty_database_url)
    assert not functions_joining_transition_tables(empty_database_url)

    roll_back_through(empty_database_url, "0015.linear_triggers")

    assert functions_joining_transition_tables(empty_database_url) == LINEAR_FUNCTIONS


def test_rolling_back_the_events_index_migration_drops_it(empty_database_url):
    migrations.apply(empty_database_url)
    roll_back_through(empty_database_url, "0018.events_in_feed_order")  # which replaces it
    assert EVENTS_INDEX in indexes(empty_database_url)

    roll_back_through(empty_database_url, "0014.events_by_job")

    assert EVENTS_INDEX not in indexes(empty_database_url)


def test_rolling_back_the_job_listing_migration_drops_its_indexes(empty_database_url):
    migrations.apply(empty_database_url)
    assert indexes(empty_database_url) >= LISTING_INDEXES

    roll_back_through(empty_database_url, "0013.job_listing")

    assert not LISTING_INDEXES & indexes(empty_database_url)


def test_rolling_back_the_job_attempts_migration_drops_its_column(empty_database_url):
    migrations.apply(empty_database_url)
    assert ATTEMPTS_COLUMN in columns(empty_database_url, "jobs")

    roll_back_through(empty_database_url, "0012.job_attempts")

    assert ATTEMPTS_COLUMN not in columns(empty_database_url, "jobs")


def test_rolling_back_the_stray_tasks_migration_drops_its_column_and_index(empty_database_url):
    migrations.apply(empty_database_url)
    assert STRAY_INDEX in indexes(empty_database_url)

    roll_back_through(empty_database_url, "0011.stray_tasks")

    assert STRAY_COLUMN not in columns(empty_database_url, "jobs")
    assert STRAY_INDEX not in indexes(empty_database_url)


def test_rolling_back_the_tallies_migration_drops_its_table_and_triggers(empty_database_url):
    migrations.apply(empty_database_url)

    roll_back_through(empty_database_url, "0010.queue_tallies")

    assert (
        public_tables(empty_database_url)
        == QUEUE_TABLES
        - {
            TALLIES_TABLE,
            JOB_TALLIES_TABLE,
        }
        | CSV_TABLES
    )
    assert triggers(empty_database_url) == TRIGGERS - TALLY_TRIGGERS - JOB_TALLY_TRIGGERS


def test_the_tallies_migration_counts_the_history_already_there(empty_database_url):
    migrations.apply(empty_database_url)
    with psycopg.connect(empty_database_url, autocommit=True, row_factory=dict_row) as conn:
        conn.execute(HISTORY)
    roll_back_through(empty_database_url, "0010.queue_tallies")

    migrations.apply(empty_database_url)

    with psycopg.connect(empty_database_url, row_factory=dict_row) as conn:
        figures = tallied(conn)
        assert figures == counted(conn)
    assert figures["chunks"] == [("echo", "completed", 1), ("echo", "failed", 1)]
    assert (figures["expiries"], figures["retries"]) == (1, {"lease_expired": 1})
    assert figures["failed"] == {"bad_format": 1}


def test_rolling_back_the_credentials_migration_drops_its_triggers(empty_database_url):
    migrations.apply(empty_database_url)

    roll_back_through(empty_database_url, "0009.credential_changes")

    assert triggers(empty_database_url) == (
        TRIGGERS - JOB_TALLY_TRIGGERS - TALLY_TRIGGERS - CREDENTIAL_TRIGGERS
    )


def test_rolling_back_the_queue_bounds_migration_drops_its_table(empty_database_url):
    migrations.apply(empty_database_url)

    roll_back_through(empty_database_url, "0008.queue_bounds")

    assert public_tables(empty_database_url) == (
        QUEUE_TABLES - {BOUNDS_TABLE, TALLIES_TABLE, JOB_TALLIES_TABLE} | CSV_TABLES
    )


def test_rolling_back_the_claim_index_migration_restores_the_trap_index(empty_database_url):
    migrations.apply(empty_database_url)

    roll_back_through(empty_database_url, "0007.claim_index_only")

    assert TRAP_INDEX in indexes(empty_database_url)


def test_rolling_back_the_announcements_migration_restores_the_row_triggers(empty_database_url):
    migrations.apply(empty_database_url)

    roll_back_through(empty_database_url, "0006.statement_announcements")

    assert triggers(empty_database_url) == (
        TRIGGERS
        - JOB_TALLY_TRIGGERS
        - TALLY_TRIGGERS
        - CREDENTIAL_TRIGGERS
        - {"tasks_announce_changes"}
        | ROW_TRIGGERS
    )


def test_rolling_back_the_storage_migration_restores_the_lease_index(empty_database_url):
    migrations.apply(empty_database_url)

    roll_back_through(empty_database_url, "0005.task_storage")

    assert not STORAGE_INDEXES & indexes(empty_database_url)
    assert "tasks_leased_idx" in indexes(empty_database_url)


def test_rolling_back_every_migration_leaves_no_table(empty_database_url):
    migrations.apply(empty_database_url)

    for _ in migrations.migration_ids():
        migrations.rollback_latest(empty_database_url)

    assert public_tables(empty_database_url) == set()


def test_applying_at_head_changes_nothing(database_url):
    before = public_tables(database_url)

    migrations.apply(database_url)

    assert public_tables(database_url) == before == HEAD_TABLES


@pytest.fixture
def rolled_back_app(app_config, database_url):
    """A coordinator started on a database whose latest migration was rolled back."""
    migrations.rollback_latest(database_url)
    flask_app = create_app(app_config)
    yield flask_app
    close(flask_app.extensions["chunkwise.runtime"])


def test_readyz_is_503_naming_the_missing_migration_when_the_schema_is_behind(
    rolled_back_app, database_url
):
    client = rolled_back_app.test_client()

    response = client.get("/readyz")

    assert response.status_code == 503
    body = response.get_json()
    assert body["error"]["code"] == "schema_behind"
    assert body["error"]["details"]["missing_migrations"] == [LATEST]
    assert LATEST in body["error"]["message"]
    assert response.headers["Retry-After"]


def test_readyz_turns_200_once_the_missing_migration_is_applied(rolled_back_app, database_url):
    client = rolled_back_app.test_client()
    assert client.get("/readyz").status_code == 503

    migrations.apply(database_url)
    response = client.get("/readyz")

    assert response.status_code == 200
    assert response.get_json()["status"] == "ready"
    assert response.get_json()["missing_migrations"] == []


def test_readyz_is_200_on_a_current_schema(client):
    response = client.get("/readyz")

    assert response.status_code == 200
    assert response.get_json()["missing_migrations"] == []


def test_healthz_answers_without_a_token(client):
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.get_json()["status"] == "ok"
