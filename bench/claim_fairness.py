"""The fair claim (sql/0028) beside main's, on the same queue, in alternating turns.

python -m bench.claim_fairness [--url postgresql://postgres@127.0.0.1:5432/postgres]
    [--baseline main] [--turns 200]

Builds two databases on the server: one at this branch's head, one with its latest migration
rolled back (main's schema and claim index), holding the same queue: one owner with 10,000
pending tasks, then the same plus a second owner's 10-task job submitted after. Main's claim
statement (repositories/tasks.py at --baseline, read with git) and this branch's take turns,
each claim in a transaction rolled back, so every turn claims from the same queue; prints the
median and range of each at claims of 1 and 100, the same for admitting a 10-task job
(repositories/jobs.py at --baseline beside this one's), and how many of the second owner's
tasks each claim of 10 leases; and what counting an owner's 10,000 unfinished tasks again
costs (why admission keeps bounds rather than counting every time).
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from functools import partial
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from app import migrations
from bench.revisions import module_at
from repositories import jobs as fair_jobs
from repositories import tasks as fair_tasks
from repositories.jobs import NewJob
from repositories.tasks import NewTask

WORKLOAD = "noop"
BACKLOG = 10_000
SMALL_JOB = 10
CAPACITIES = (1, 100)
WIDE_OPEN = 10**12


def main(argv: list[str] | None = None) -> None:
    """Build both queues, time both claims in turns, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--baseline", default="main")
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args(argv)
    baseline = module_at(args.baseline, "repositories/tasks.py")
    baseline_jobs = module_at(args.baseline, "repositories/jobs.py")
    with database(args.url, "main") as main_url, database(args.url, "fair") as fair_url:
        migrations.apply(main_url)
        migrations.rollback_latest(main_url)
        migrations.apply(fair_url)
        print(f"turns: {args.turns} of each, alternating; milliseconds per claim")
        for owners in (1, 2):
            for url, fair in ((main_url, False), (fair_url, True)):
                seed(url, owners=owners, fair=fair)
            for capacity in CAPACITIES:
                with connect(main_url) as on_main, connect(fair_url) as on_fair:
                    main_ms, fair_ms = in_turns(
                        partial(claim_ms, on_main, baseline.claim, capacity),
                        partial(claim_ms, on_fair, fair_tasks.claim, capacity),
                        args.turns,
                    )
                print(
                    f"owners={owners} capacity={capacity:>3}: main {summary(main_ms)}"
                    f" | fair {summary(fair_ms)}"
                    f" | fair/main {statistics.median(fair_ms) / statistics.median(main_ms):.2f}"
                )
        with connect(main_url) as on_main, connect(fair_url) as on_fair:
            main_ms, fair_ms = in_turns(
                partial(admit_ms, on_main, baseline_jobs.admit_job, fair=False),
                partial(admit_ms, on_fair, fair_jobs.admit_job, fair=True),
                args.turns,
            )
        print(
            f"admission of a {SMALL_JOB}-task job: main {summary(main_ms)}"
            f" | fair {summary(fair_ms)}"
            f" | fair/main {statistics.median(fair_ms) / statistics.median(main_ms):.2f}"
        )
        with connect(fair_url) as on_fair:
            recounts = [recount_ms(on_fair) for _ in range(args.turns // 10)]
        print(f"recount of the first owner's {BACKLOG:,} unfinished tasks: {summary(recounts)}")
        print(
            f"second owner's tasks in a claim of {SMALL_JOB}: "
            f"main {second_owner_share(main_url, baseline.claim)}, "
            f"fair {second_owner_share(fair_url, fair_tasks.claim)}"
        )


@contextmanager
def database(server_url: str, name: str):
    """A new database on the server, dropped afterwards."""
    dbname = f"chunkwise_bench_{name}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    try:
        yield urlunsplit(urlsplit(server_url)._replace(path=f"/{dbname}"))
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(dbname)))


def seed(url: str, *, owners: int, fair: bool) -> None:
    """Empty the queue and fill it: the first owner's backlog, then (owners=2) the second's
    job, numbered as admission numbers them (the second's from the backlog's head)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("TRUNCATE jobs, users CASCADE")
        for n in range(owners):
            conn.execute("INSERT INTO users (name, role) VALUES (%s, 'user')", (f"owner-{n}",))
            size = BACKLOG if n == 0 else SMALL_JOB
            conn.execute(
                """
                INSERT INTO jobs (id, owner_id, workload, input_uri, chunks_total, trace_id,
                                  created_at)
                SELECT gen_random_uuid(), u.id, %(workload)s, 's3://in/', %(size)s, 't',
                       now() + make_interval(secs => %(n)s)
                FROM users u WHERE u.name = %(owner)s
                """,
                {"workload": WORKLOAD, "size": size, "n": n, "owner": f"owner-{n}"},
            )
            tag = sql.SQL(", fair_tag") if fair else sql.SQL("")
            conn.execute(
                sql.SQL(
                    """
                    INSERT INTO tasks (id, job_id, chunk_index, workload, priority, input_uri,
                                       input_sha256, max_attempts, created_at{tag})
                    SELECT gen_random_uuid(), j.id, i, j.workload, 0, 's3://in/' || i,
                           repeat('a', 64), 3, j.created_at{value}
                    FROM jobs j JOIN users u ON u.id = j.owner_id,
                         generate_series(0, j.chunks_total - 1) AS i
                    WHERE u.name = %(owner)s
                    """
                ).format(tag=tag, value=sql.SQL(", i + 1") if fair else sql.SQL("")),
                {"owner": f"owner-{n}"},
            )
        # Admission's bounds, wide open: the bench times the statement, not a refusal.
        conn.execute("INSERT INTO queue_bounds VALUES (%s, 0) ON CONFLICT DO NOTHING", (WORKLOAD,))
        if fair:
            conn.execute(
                "INSERT INTO user_bounds (workload, owner_id, unfinished, stored_bytes)"
                " SELECT %s, id, 0, 0 FROM users",
                (WORKLOAD,),
            )
        conn.execute("VACUUM ANALYZE tasks")
        conn.execute("VACUUM ANALYZE jobs")


def connect(url: str) -> psycopg.Connection:
    """A connection that reads rows as dicts, as the coordinator's pool's do."""
    return psycopg.connect(url, row_factory=dict_row)


def credential_of(claim: Callable) -> dict:
    """The worker credential argument, for a claim that binds worker ids (sql/0026)."""
    return {"credential_id": 1} if "credential_id" in inspect.signature(claim).parameters else {}


def claim_ms(conn: psycopg.Connection, claim: Callable, capacity: int) -> float:
    """One claim of `capacity`, rolled back; its milliseconds."""
    started = time.perf_counter()
    claim(
        conn,
        **credential_of(claim),
        worker_id="bench",
        workloads=[WORKLOAD],
        named=[WORKLOAD],
        capacity=capacity,
        max_per_worker=None,
        max_total=None,
        lease_seconds=30,
    )
    elapsed = time.perf_counter() - started
    conn.rollback()
    return elapsed * 1000


def admit_ms(conn: psycopg.Connection, admit: Callable, *, fair: bool) -> float:
    """One admission of a SMALL_JOB-task job as the first owner, rolled back; its ms."""
    owner = conn.execute("SELECT id FROM users WHERE name = 'owner-0'").fetchone()["id"]
    conn.rollback()
    job_id = uuid.uuid4()
    job = NewJob(
        id=job_id,
        owner_id=owner,
        workload=WORKLOAD,
        input_uri="s3://in/",
        input_sha256=None,
        parameters={},
        labels={},
        priority=0,
        chunks_total=SMALL_JOB,
        idempotency_key=None,
        request_sha256=None,
        trace_id="bench",
        max_attempts=3,
    )
    tasks = [
        NewTask(uuid.uuid5(job_id, str(i)), i, f"s3://in/{i}", "a" * 64, {"n": i}, 3)
        for i in range(SMALL_JOB)
    ]
    quotas = {"user_limit": WIDE_OPEN, "byte_limit": WIDE_OPEN} if fair else {}
    started = time.perf_counter()
    fits, _ = admit(conn, job, tasks, queue_limit=WIDE_OPEN, actor="bench", **quotas)
    elapsed = time.perf_counter() - started
    conn.rollback()
    assert fits
    return elapsed * 1000


def recount_ms(conn: psycopg.Connection) -> float:
    """One count of the first owner's unfinished work (what a refused admission does before
    it decides), rolled back; its ms."""
    owner = conn.execute("SELECT id FROM users WHERE name = 'owner-0'").fetchone()["id"]
    started = time.perf_counter()
    fair_jobs.recount_owner(conn, WORKLOAD, owner)
    elapsed = time.perf_counter() - started
    conn.rollback()
    return elapsed * 1000


def in_turns(
    first: Callable[[], float], second: Callable[[], float], turns: int
) -> tuple[list[float], list[float]]:
    """Each measurement `turns` times, alternating, so a machine's drift moves both alike."""
    a, b = [], []
    for _ in range(turns):
        a.append(first())
        b.append(second())
    return a, b


def second_owner_share(url: str, claim: Callable) -> int:
    """How many of a claim of SMALL_JOB the second owner's tasks are (rolled back)."""
    with psycopg.connect(url, row_factory=dict_row) as conn:
        claimed = claim(
            conn,
            **credential_of(claim),
            worker_id="bench",
            workloads=[WORKLOAD],
            named=[WORKLOAD],
            capacity=SMALL_JOB,
            max_per_worker=None,
            max_total=None,
            lease_seconds=30,
        )
        rows = conn.execute(
            "SELECT j.id, u.name FROM jobs j JOIN users u ON u.id = j.owner_id"
            " WHERE j.id = ANY(%s)",
            ([c.task.job_id for c in claimed],),
        ).fetchall()
        owners = {r["id"]: r["name"] for r in rows}
        conn.rollback()
    return sum(owners[c.task.job_id] == "owner-1" for c in claimed)


def summary(values: list[float]) -> str:
    """Median and range."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


if __name__ == "__main__":
    main()
