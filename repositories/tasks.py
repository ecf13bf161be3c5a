"""Tasks (a job's chunks): claims that open their attempts, fenced updates, expiry, cancels."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any
from uuid import UUID

from psycopg import Connection, errors, sql
from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb

from repositories import _field_names, channels, columns, from_row, locks

# The not_before of a task whose job waits for the jobs it depends on (sql/0023): a time no
# claim reaches, until the last of them succeeds and release_blocked lets the tasks go.
BLOCKED = datetime(9999, 12, 31, tzinfo=UTC)


@dataclass(frozen=True)
class Task:
    """A task row."""

    id: UUID
    job_id: UUID
    chunk_index: int
    workload: str
    priority: int
    input_uri: str
    input_sha256: str
    parameters: dict
    status: str
    attempt: int
    max_attempts: int
    lost_retries: int
    read_retries: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    heartbeat_at: datetime | None
    checkpoint: dict | None
    result_uri: str | None
    result_sha256: str | None
    metrics: dict | None
    error_code: str | None
    error_message: str | None
    error_details: dict | None
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    version: int
    # A task re-queued after a failure, or of a scheduled job, is not claimed before this
    # (sql/0019, sql/0020); BLOCKED while its job waits for the jobs it depends on (sql/0023).
    not_before: datetime | None = None
    # A job's timeout_seconds, and the time the current attempt must end by (sql/0021).
    timeout_seconds: int | None = None
    deadline: datetime | None = None
    # The task's JSON arguments as the canonical text input_sha256 digests (sql/0030); None
    # for a task whose input is at input_uri.
    args: str | None = None

    @property
    def blocked(self) -> bool:
        """Whether it waits for the jobs its job depends on, rather than for a time."""
        return self.not_before == BLOCKED


# What the statements return of a task: named, so a new column leaves them be once they are
# prepared (repositories/__init__.py). As `t` where another relation shares a column name.
_COLUMNS = columns(Task)
_T_COLUMNS = columns(Task, "t")
_NAMES = _field_names(Task)
_WIDTH = len(_NAMES)


def _task_first(cursor: object) -> Callable[[Sequence[Any]], tuple]:
    """Rows of a hot statement that returns _COLUMNS first, as (Task, *the columns after them).

    Built by position, with no dict per row between (a third of a batch's row handling), and
    not through the frozen dataclass's __init__, which sets each of its 31 fields through
    object.__setattr__: 9.4 µs a Task against 2.0 µs filling its __dict__ at once, and a
    completed no-op task is built three times (its claim, the fence check, the completion).
    The Task is the same (tests/unit/test_task_rows.py), and as frozen.
    """

    def task_first(values: Sequence[Any]) -> tuple:
        task = object.__new__(Task)
        # Not strict: the columns after the Task's are not its fields.
        task.__dict__.update(zip(_NAMES, values, strict=False))
        return (task, *values[_WIDTH:])

    return task_first


@dataclass(frozen=True)
class NewTask:
    """One chunk of a new job (repositories.jobs.admit_job writes it with the job's own
    workload and priority)."""

    id: UUID
    chunk_index: int
    input_uri: str
    input_sha256: str
    parameters: dict
    max_attempts: int
    args: str | None = None  # canonical JSON text (sql/0030)


@dataclass(frozen=True)
class ClaimedTask:
    """A task just leased, with the attempt the claim opened and the lease's secret token."""

    task: Task
    attempt_id: UUID
    trace_id: str
    lease_token: str


@dataclass(frozen=True)
class ExpiredLease:
    """A lease the sweeper took back, and what became of the task."""

    task: Task
    worker_id: str


def hold_queue_bound(conn: Connection, workload: str) -> None:
    """Lock a workload's queue bound, creating it (at 0) if it has none yet.

    Creating it makes a transaction that is inserting it too wait for that one: a workload's
    removal so serialises with every admission of it, even the first (services.workload_registry).
    """
    conn.execute(
        """
        INSERT INTO queue_bounds (workload, unfinished) VALUES (%(workload)s, 0)
        ON CONFLICT (workload) DO UPDATE SET unfinished = queue_bounds.unfinished
        """,
        {"workload": workload},
    )


def recount_unfinished(conn: Connection, workload: str) -> int | None:
    """Count a served workload's pending and leased tasks, and start its queue bound again from
    there; None if the workloads table no longer serves it (nothing to count for).

    Two statements: the count must see every admission that took the bound's row before this
    transaction did, so it is taken only once the row is locked. The caller's transaction
    keeps the lock, so no admission of the workload overtakes the count until it commits. The
    count's own snapshot also sees a removal that held the row before this one: the caller
    must then write nothing (the removal deleted the row; holding it re-created it).
    """
    hold_queue_bound(conn, workload)
    # Three counts, so each reads the partial index of its own rows (see sql/0007 and 0019).
    row = conn.execute(
        """
        UPDATE queue_bounds SET unfinished =
            (SELECT count(*) FROM tasks
             WHERE status = 'pending' AND workload = %(workload)s AND not_before IS NULL)
          + (SELECT count(*) FROM tasks
             WHERE status = 'pending' AND workload = %(workload)s AND not_before IS NOT NULL)
          + (SELECT count(*) FROM tasks WHERE status = 'leased' AND workload = %(workload)s)
        WHERE workload = %(workload)s
          AND EXISTS (SELECT FROM workloads
                      WHERE name = %(workload)s AND removed_at IS NULL)
        RETURNING unfinished
        """,
        {"workload": workload},
    ).fetchone()
    return None if row is None else row["unfinished"]


# The claim statement, part by part; each part is one CTE of it, named as in the statement.
# held: the leases the caps count, counted only when a cap is set.
_HELD = """
SELECT count(*) FILTER (WHERE lease_owner = %(worker)s) AS mine, count(*) AS total
FROM tasks
WHERE status = 'leased' AND workload = ANY(%(workloads)b)
  AND (%(per_worker)s::int IS NOT NULL OR %(total)s::int IS NOT NULL)"""
# room: how many the caps let this claim lease (LEAST ignores NULLs: an absent cap does not
# limit the claim).
_ROOM = """
SELECT GREATEST(0, LEAST(%(capacity)s, %(per_worker)s::int - mine, %(total)s::int - total)) AS n
FROM held"""
# unpaused: the workloads no operator has paused (sql/0024), read by this statement's
# snapshot: a pause holds from the first claim that starts after it commits.
_UNPAUSED = """
SELECT w.name FROM unnest(%(workloads)b::text[]) AS w(name)
WHERE NOT EXISTS (SELECT FROM workload_pauses p WHERE p.workload = w.name)"""
# ready: each workload's head read in claim order from tasks_ready_idx, then merged (one
# ordered scan of "workload = ANY" would sort every pending row instead). Within a priority,
# fair_tag interleaves the owners (sql/0028). LIMIT is the capacity, not the room, and written
# into the statement, so even the generic plan knows the scan ends early (see _claim_of).
_READY = """
SELECT h.* FROM unpaused AS w CROSS JOIN LATERAL (
  SELECT t.id, t.priority, t.fair_tag, t.created_at, t.job_id, t.chunk_index FROM tasks t
  WHERE t.status = 'pending' AND t.workload = w.name AND t.not_before IS NULL
  ORDER BY t.priority DESC, t.fair_tag, t.created_at, t.job_id, t.chunk_index
  LIMIT {limit} FOR UPDATE SKIP LOCKED
) AS h"""
# due: and the tasks whose waits (a retry's, a schedule's) have ended, the longest ended
# first, from tasks_waiting_idx (sql/0019): no claim reads past the ones still waiting.
_DUE = """
SELECT d.* FROM unpaused AS w CROSS JOIN LATERAL (
  SELECT t.id, t.priority, t.fair_tag, t.created_at, t.job_id, t.chunk_index FROM tasks t
  WHERE t.status = 'pending' AND t.workload = w.name AND t.not_before <= now()
  ORDER BY t.not_before LIMIT {limit} FOR UPDATE SKIP LOCKED
) AS d"""
# candidates: the first of both in claim order that the room allows.
_CANDIDATES = """
SELECT h.id FROM (SELECT * FROM ready UNION ALL SELECT * FROM due) AS h
ORDER BY h.priority DESC, h.fair_tag, h.created_at, h.job_id, h.chunk_index
LIMIT (SELECT n FROM room)"""
# tokens: 244 random bits (two version 4 UUIDs) per lease, made only for the rows leased;
# and the ids of the attempt each opens, so the answer reads them from the leases rather than
# joining two CTEs (whose sizes the planner cannot see: it compared every lease with every
# attempt, 9,900 rows dropped for a claim of 100).
_TOKENS = """
SELECT id, 'cwl_' || replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', '')
       AS lease_token,
       gen_random_uuid() AS attempt_id, replace(gen_random_uuid()::text, '-', '') AS trace_id
FROM candidates"""
# leased: the leases, by primary key (the planner cannot know how many candidates the room
# allows); an attempt's lease never outlasts its deadline (LEAST ignores the NULL of a task
# without a timeout); only the token's SHA-256 is kept (sql/0026).
_LEASED = """
UPDATE tasks t SET status = 'leased', attempt = t.attempt + 1, lease_owner = %(worker)s,
  lease_expires_at = LEAST(now() + make_interval(secs => %(lease)s),
                           now() + make_interval(secs => t.timeout_seconds)),
  deadline = now() + make_interval(secs => t.timeout_seconds),
  heartbeat_at = now(), started_at = COALESCE(t.started_at, now()), not_before = NULL,
  lease_sha256 = encode(sha256(convert_to(k.lease_token, 'UTF8')), 'hex'),
  version = t.version + 1
FROM tokens k
WHERE t.id = ANY(ARRAY(SELECT id FROM tokens)) AND k.id = t.id
RETURNING t.*, k.lease_token, k.attempt_id, k.trace_id AS attempt_trace_id"""
# attempts: one opened per lease, with its own trace id.
_ATTEMPTS = """
INSERT INTO task_attempts (id, task_id, attempt, worker_id, trace_id, lease_sha256)
SELECT l.attempt_id, l.id, l.attempt, %(worker)s, l.attempt_trace_id, l.lease_sha256
FROM leased l"""
# started: the leased tasks' queued jobs move to running. SKIP LOCKED: a job a cancel or a
# merge holds is left alone rather than waited for with task locks held; its completions move
# it on later anyway.
_STARTED = """
UPDATE jobs j SET status = 'running', started_at = COALESCE(j.started_at, now()),
  revision = j.revision + 1
WHERE j.id IN (SELECT id FROM jobs
               WHERE id IN (SELECT job_id FROM leased) AND status = 'queued'
               FOR UPDATE SKIP LOCKED)"""
# seen: the worker recorded as seen. The only row a claim may wait for: a batch of this
# worker's results updates it last, after its job, so the two cannot wait for each other. A
# worker id bound to another credential is set to 0, which workers_credential_id_check
# refuses: the whole claim fails (sql/0026). It always writes one row, so it is where the
# claim's transaction is told not to wait at commit for its WAL flush (see claim()).
_SEEN = """
INSERT INTO workers (id, capacity, workloads, credential_id)
SELECT %(worker)s, %(capacity)s, %(named)b, %(credential)s
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed
ON CONFLICT (id) DO UPDATE SET last_seen_at = now(),
  capacity = GREATEST(workers.capacity, EXCLUDED.capacity),
  workloads = EXCLUDED.workloads,
  credential_id = CASE WHEN workers.credential_id IS NULL
                         OR workers.credential_id = EXCLUDED.credential_id
                       THEN EXCLUDED.credential_id ELSE 0 END"""
# Composed once, with {limit} where each scan stops; short enough (under 4 KiB) for psycopg
# to keep its parsed form rather than parse it again on every claim
# (tests/unit/test_statements.py).
_CLAIM = (
    sql.SQL("""
WITH held AS ({held}), room AS ({room}), unpaused AS ({unpaused}), ready AS ({ready}),
due AS ({due}), candidates AS ({candidates}), tokens AS ({tokens}), leased AS ({leased}),
attempts AS ({attempts}), started AS ({started}), seen AS ({seen})
SELECT {columns}, l.lease_token, l.attempt_id, l.attempt_trace_id
FROM leased l
ORDER BY l.priority DESC, l.created_at, l.job_id, l.chunk_index
""")
    .format(
        held=sql.SQL(_HELD),
        room=sql.SQL(_ROOM),
        unpaused=sql.SQL(_UNPAUSED),
        ready=sql.SQL(_READY),
        due=sql.SQL(_DUE),
        candidates=sql.SQL(_CANDIDATES),
        tokens=sql.SQL(_TOKENS),
        leased=sql.SQL(_LEASED),
        attempts=sql.SQL(_ATTEMPTS),
        started=sql.SQL(_STARTED),
        seen=sql.SQL(_SEEN),
        columns=_COLUMNS,
    )
    .as_string()
)


@lru_cache(maxsize=256)
def _claim_of(capacity: int) -> str:
    """The claim whose scans stop at `capacity` rows, a number written into its text.

    A LIMIT given as a parameter is guessed at a tenth of the rows in a generic plan, which
    on a long queue could make a sort of every pending row look cheaper than reading the
    index in order; a number written in keeps the plan right for this capacity.
    """
    return sql.SQL(_CLAIM).format(limit=sql.Literal(capacity)).as_string()


# The claim is planned once per connection and capacity, not on every call. Prepared,
# PostgreSQL would still plan it afresh each time: its custom plans know how many workloads the
# claim names and whether a cap is set, so they always look cheaper than the generic plan, whose
# shape is the same (each workload's head read in order from tasks_ready_idx, locked, limited).
# Planning was 40% of a claim's database time (docs/performance/profile.md). The setting is
# local to the claim's transaction: the implicit one the pipeline's statements share on an
# autocommit connection (it ends with them), or the caller's, for which a RESET after the
# claim restores it.
_PLAN_ONCE = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"
_PLAN_AS_BEFORE = "RESET plan_cache_mode"


def claim(
    conn: Connection,
    *,
    worker_id: str,
    credential_id: int,
    workloads: Sequence[str],
    named: Sequence[str],
    capacity: int,
    max_per_worker: int | None,
    max_total: int | None,
    lease_seconds: int,
    turn: str | None = None,
) -> list[ClaimedTask] | None:
    """Lease up to `capacity` pending tasks within the lease caps, opening one attempt each;
    None when the worker id is bound to another credential (then the caller must roll back).

    Tasks of a paused workload (sql/0024) stay pending. One statement, so one commit: it also
    moves the tasks' queued jobs to running and records the worker as seen, with the workloads
    it named and the largest capacity it asked for. It sets its transaction's
    synchronous_commit off (as SET LOCAL would), so on an autocommit connection a claim is one
    round trip that does not wait for its WAL flush: a lease lost to a database crash before
    the WAL writer flushes it (within 0.2 s by default) is a lease never granted, its worker's
    heartbeats and result are fenced off (409) and the task is claimed again, the at-least-once
    running every lease allows. A flush writes every claim committed before it.
    A cap of None is no cap, and then its count is never taken. With caps, the claim must run
    in the workload's claim turn (see services.tasks) so the arithmetic cannot be raced: the
    caller's transaction holds it, or `turn` names the workload whose turn the claim takes
    first, in the same round trip and transaction (its snapshot is taken after the turn is);
    SKIP LOCKED keeps claims from waiting on rows another transaction is finishing. A claim
    locks up to `capacity` ready rows of each workload, and as many whose waits (a retry's or
    a schedule's) have ended, until it commits, and leases the first ones in claim order that
    its room allows; the rest stay pending.
    Each lease gets a secret token, of which only the SHA-256 is stored (sql/0026). A worker
    id bound to another credential fails the statement, so nothing is leased or recorded,
    even when two credentials race to use a new one first.
    """
    params = {
        "worker": worker_id,
        "credential": credential_id,
        "workloads": list(workloads),
        "named": list(named),
        "capacity": capacity,
        "per_worker": max_per_worker,
        "total": max_total,
        "lease": lease_seconds,
    }
    in_transaction = conn.info.transaction_status != TransactionStatus.IDLE
    try:
        # One round trip: the statements go together, and fail together.
        with conn.pipeline():
            if turn is not None:
                locks.take_turn(conn, locks.CLAIM, turn)
            conn.execute(_PLAN_ONCE, prepare=True)
            statement = _claim_of(capacity)
            leased = conn.cursor(row_factory=_task_first).execute(statement, params, prepare=True)
            if in_transaction:
                conn.execute(_PLAN_AS_BEFORE, prepare=True)
        rows = leased.fetchall()
    except errors.CheckViolation as exc:
        if exc.diag.constraint_name == "workers_credential_id_check":
            return None
        raise
    return [
        ClaimedTask(task, attempt_id, trace_id, token) for task, token, attempt_id, trace_id in rows
    ]


def lease_digest(lease_token: str) -> str:
    """The hex SHA-256 under which a lease token is stored (the claim computes it in SQL)."""
    return hashlib.sha256(lease_token.encode()).hexdigest()


@dataclass(frozen=True)
class Renewal:
    """A lease a worker asks to extend, under the attempt and token it holds, with any new
    checkpoint."""

    task_id: UUID
    attempt: int
    lease_token: str
    checkpoint: dict | None = None


def renew_many(
    conn: Connection,
    worker_id: str,
    credential_id: int,
    renewals: Sequence[Renewal],
    lease_seconds: int,
) -> dict[UUID, datetime]:
    """Extend each of the caller's current leases named, storing checkpoints, in one statement;
    return each renewed task's new expiry (a renewal not among them was fenced off).

    The rows are locked in id order, as a batch of results locks them: two batches of one
    worker's tasks then wait for each other rather than deadlock.
    """
    rows = conn.execute(
        """
        WITH v AS (
            SELECT * FROM unnest(%(ids)b::uuid[], %(attempts)b::int[], %(leases)b::text[],
                                 %(checkpoints)b::jsonb[])
                AS v(id, attempt, lease, checkpoint)
        ), mine AS (
            SELECT t.id, v.checkpoint FROM tasks t JOIN v ON v.id = t.id
            WHERE t.lease_owner = %(worker)s AND t.attempt = v.attempt AND t.status = 'leased'
              AND t.lease_sha256 = v.lease AND (t.deadline IS NULL OR t.deadline > now())
              AND NOT EXISTS (SELECT FROM workers WHERE id = %(worker)s
                              AND credential_id <> %(credential)s)
            ORDER BY t.id
            FOR UPDATE OF t
        )
        UPDATE tasks t SET lease_expires_at = LEAST(now() + make_interval(secs => %(lease)s),
                                                    t.deadline),
            heartbeat_at = now(),
            checkpoint = COALESCE(mine.checkpoint, t.checkpoint),
            version = t.version + 1
        FROM mine
        WHERE t.id = mine.id
        RETURNING t.id, t.lease_expires_at
        """,
        {
            "worker": worker_id,
            "credential": credential_id,
            "lease": lease_seconds,
            "ids": [r.task_id for r in renewals],
            "attempts": [r.attempt for r in renewals],
            "leases": [lease_digest(r.lease_token) for r in renewals],
            "checkpoints": [
                Jsonb(r.checkpoint) if r.checkpoint is not None else None for r in renewals
            ],
        },
        prepare=True,
    ).fetchall()
    return {r["id"]: r["lease_expires_at"] for r in rows}


_GET_LEASED = (
    sql.SQL("""
        SELECT {} FROM tasks
        WHERE id = %(id)s AND lease_owner = %(worker)s AND attempt = %(attempt)s
          AND status = 'leased' AND lease_sha256 = %(lease)s
          AND NOT EXISTS (SELECT FROM workers WHERE id = %(worker)s
                          AND credential_id <> %(credential)s)
        """)
    .format(_COLUMNS)
    .as_string()
)


def get_leased(
    conn: Connection,
    task_id: UUID,
    worker_id: str,
    credential_id: int,
    attempt: int,
    lease_token: str,
) -> Task | None:
    """Return the task if the caller holds its current lease under this attempt and token."""
    row = conn.execute(
        _GET_LEASED,
        {
            "id": task_id,
            "worker": worker_id,
            "credential": credential_id,
            "attempt": attempt,
            "lease": lease_digest(lease_token),
        },
    ).fetchone()
    return from_row(Task, row) if row else None


_GET = sql.SQL("SELECT {} FROM tasks WHERE id = %(id)s").format(_COLUMNS).as_string()


def get(conn: Connection, task_id: UUID) -> Task | None:
    """Return a task."""
    row = conn.execute(_GET, {"id": task_id}).fetchone()
    return from_row(Task, row) if row else None


_GET_MANY = sql.SQL("SELECT {} FROM tasks WHERE id = ANY(%(ids)b)").format(_COLUMNS).as_string()


def get_many(conn: Connection, task_ids: Sequence[UUID]) -> dict[UUID, Task]:
    """The tasks that exist among these ids, by id."""
    found = conn.cursor(row_factory=_task_first)
    rows = found.execute(_GET_MANY, {"ids": list(task_ids)}, prepare=True).fetchall()
    return {task.id: task for (task,) in rows}


@dataclass(frozen=True)
class Outcome:
    """A result a worker reports under one attempt and its lease token."""

    task_id: UUID
    attempt: int
    lease_token: str
    result_uri: str
    result_sha256: str
    metrics: dict
    # The canonical JSON of a value the coordinator stores (repositories.task_values).
    value: str | None = None


# The fenced completion, part by part; each part is one CTE of it, named as in the statement.
# mine: the rows whose current lease is the caller's, locked in id order as a batch of
# heartbeats locks them (see renew_many); n is the result's place in the batch.
_MINE = """
SELECT t.id, v.uri, v.sha, v.metrics, v.n FROM tasks t JOIN v ON v.id = t.id
WHERE t.lease_owner = %(worker)s AND t.attempt = v.attempt AND t.status = 'leased'
  AND t.lease_sha256 = v.lease AND (t.deadline IS NULL OR t.deadline > now())
  AND NOT EXISTS (SELECT FROM workers WHERE id = %(worker)s
                  AND credential_id <> %(credential)s)
ORDER BY t.id
FOR UPDATE OF t"""
_DONE = """
UPDATE tasks t SET status = 'completed', result_uri = mine.uri,
    result_sha256 = mine.sha, metrics = mine.metrics,
    lease_owner = NULL, lease_expires_at = NULL, lease_sha256 = NULL, completed_at = now(),
    error_code = NULL, error_message = NULL, error_details = NULL,
    version = t.version + 1
FROM mine
WHERE t.id = mine.id
RETURNING {t_columns}, mine.n"""
# closed: each completed task's attempt, looked up by the (task_id, attempt) index one task at
# a time (LIMIT 1 keeps each lookup on its own): CTEs hide their sizes from the planner, which
# then joins two of them by comparing every row with every row, 10,000 times for 100 results.
_CLOSED = """
UPDATE task_attempts SET outcome = 'completed', finished_at = now()
WHERE outcome IS NULL AND id = ANY(ARRAY(
  SELECT o.id FROM done d CROSS JOIN LATERAL (
    SELECT id FROM task_attempts WHERE task_id = d.id AND attempt = d.attempt AND outcome IS NULL
    LIMIT 1) AS o))"""
# announced: each completion's chunk.completed, to its job's owner under the job's trace id,
# numbered in the batch's order. The statement's own SELECT reads neither closed nor this, so
# PostgreSQL runs both after that SELECT has read (and so locked) every completed task: the
# job is touched only once its tasks are held, as when these were statements of their own. The
# SELECT reads each task's attempt as the statement found it (its id and trace id never change).
_ANNOUNCED = """
INSERT INTO outbox (job_id, owner_id, event, payload, trace_id)
SELECT d.job_id, j.owner_id, 'chunk.completed',
       jsonb_build_object('task_id', d.id, 'chunk_index', d.chunk_index, 'attempt', d.attempt),
       j.trace_id
FROM done d JOIN jobs j ON j.id = d.job_id
ORDER BY d.n"""
# Composed once, under 4 KiB (tests/unit/test_statements.py), as the claim is.
_COMPLETE_MANY = (
    sql.SQL("""
WITH v AS (
  SELECT * FROM unnest(%(ids)b::uuid[], %(attempts)b::int[], %(leases)b::text[],
                       %(uris)b::text[], %(shas)b::text[], %(metrics)b::jsonb[])
    WITH ORDINALITY AS v(id, attempt, lease, uri, sha, metrics, n)
), mine AS ({mine}), done AS ({done}), closed AS ({closed}), announced AS ({announced})
SELECT {d_columns}, a.id AS attempt_id, a.trace_id AS attempt_trace_id
FROM done d LEFT JOIN LATERAL (
  SELECT id, trace_id FROM task_attempts WHERE task_id = d.id AND attempt = d.attempt LIMIT 1
) AS a ON true
ORDER BY d.n
""")
    .format(
        mine=sql.SQL(_MINE),
        done=sql.SQL(_DONE).format(t_columns=_T_COLUMNS),
        closed=sql.SQL(_CLOSED),
        announced=sql.SQL(_ANNOUNCED),
        d_columns=columns(Task, "d"),
    )
    .as_string()
)


@dataclass(frozen=True)
class Completed:
    """A task just completed, and the attempt it completed (its id and trace id)."""

    task: Task
    attempt_id: UUID | None
    attempt_trace_id: str | None


def complete_many(
    conn: Connection, worker_id: str, credential_id: int, outcomes: Sequence[Outcome]
) -> list[Completed]:
    """Complete each task whose current lease is the caller's under that attempt and token, in
    one statement; return the tasks completed (an outcome not among them was fenced off), in
    the order of the outcomes.

    The same statement closes each completed task's attempt and announces its chunk.completed
    in the outbox: one round trip rather than three. The rows are locked in id order, as a
    batch of heartbeats locks them (see renew_many).
    """
    rows = (
        conn.cursor(row_factory=_task_first)
        .execute(
            _COMPLETE_MANY,
            {
                "worker": worker_id,
                "credential": credential_id,
                "ids": [o.task_id for o in outcomes],
                "attempts": [o.attempt for o in outcomes],
                "leases": [lease_digest(o.lease_token) for o in outcomes],
                "uris": [o.result_uri for o in outcomes],
                "shas": [o.result_sha256 for o in outcomes],
                "metrics": [Jsonb(o.metrics) for o in outcomes],
            },
            prepare=True,
        )
        .fetchall()
    )
    return [Completed(*row) for row in rows]


_FAIL = (
    sql.SQL("""
        WITH fenced AS (
            SELECT id, (%(retryable)s AND attempt < max_attempts
                        AND (%(code)s <> 'input_unavailable' OR read_retries < %(budget)s)
                       ) AS retry
            FROM tasks
            WHERE id = %(id)s AND lease_owner = %(worker)s AND attempt = %(attempt)s
              AND status = 'leased' AND lease_sha256 = %(lease)s
              AND (deadline IS NULL OR deadline > now())
              AND NOT EXISTS (SELECT FROM workers WHERE id = %(worker)s
                              AND credential_id <> %(credential)s)
            FOR UPDATE
        )
        UPDATE tasks t SET
            status = CASE WHEN f.retry THEN 'pending' ELSE 'failed' END,
            completed_at = CASE WHEN f.retry THEN NULL ELSE now() END,
            -- No wait at all leaves it with the ready tasks (tasks_ready_idx).
            not_before = CASE WHEN f.retry AND %(delay)s > 0
                              THEN now() + make_interval(secs => %(delay)s) END,
            read_retries = t.read_retries + (%(code)s = 'input_unavailable')::int,
            lease_owner = NULL, lease_expires_at = NULL, lease_sha256 = NULL,
            error_code = %(code)s, error_message = %(message)s, error_details = %(details)s,
            version = t.version + 1
        FROM fenced f WHERE t.id = f.id
        RETURNING {}
        """)
    .format(_T_COLUMNS)
    .as_string()
)


def fail(
    conn: Connection,
    task_id: UUID,
    worker_id: str,
    credential_id: int,
    attempt: int,
    lease_token: str,
    *,
    error_code: str,
    error_message: str,
    error_details: dict,
    retryable: bool,
    read_budget: int,
    retry_delay: float,
) -> Task | None:
    """Record the caller's failure: back to pending while budgets remain, not to be claimed
    for `retry_delay` seconds, else failed."""
    row = conn.execute(
        _FAIL,
        {
            "id": task_id,
            "worker": worker_id,
            "credential": credential_id,
            "attempt": attempt,
            "lease": lease_digest(lease_token),
            "code": error_code,
            "message": error_message,
            "details": Jsonb(error_details),
            "retryable": retryable,
            "budget": read_budget,
            "delay": retry_delay,
        },
    ).fetchone()
    return from_row(Task, row) if row else None


def jobs_with_expired_leases(
    conn: Connection, *, now: datetime | None, limit: int = 500
) -> list[UUID]:
    """The jobs holding a lease that ran out, the longest expired first, up to `limit`."""
    rows = conn.execute(
        """
        SELECT job_id FROM tasks
        WHERE status = 'leased' AND lease_expires_at < COALESCE(%(now)s, now())
        GROUP BY job_id
        ORDER BY min(lease_expires_at)
        LIMIT %(limit)s
        """,
        {"now": now, "limit": limit},
    ).fetchall()
    return [r["job_id"] for r in rows]


_EXPIRE = (
    sql.SQL("""
        WITH due AS MATERIALIZED (
            SELECT id FROM jobs WHERE id = %(job)s FOR UPDATE SKIP LOCKED
        ), overdue AS (
            SELECT id, lease_owner, attempt < max_attempts AS attempts_left, lost_retries,
                   deadline <= COALESCE(%(now)s, now()) AS timed_out, timeout_seconds
            FROM tasks
            WHERE job_id IN (SELECT id FROM due)
              AND status = 'leased' AND lease_expires_at < COALESCE(%(now)s, now())
            ORDER BY lease_expires_at
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ), expired AS (
            SELECT id, lease_owner, timed_out IS TRUE AS timed_out, timeout_seconds,
                   attempts_left AND (timed_out OR lost_retries < %(budget)s) AS retry
            FROM overdue
        )
        UPDATE tasks t SET
            status = CASE WHEN e.retry THEN 'pending' ELSE 'failed' END,
            completed_at = CASE WHEN e.retry THEN NULL ELSE now() END,
            lost_retries = t.lost_retries + (NOT e.timed_out)::int,
            lease_owner = NULL, lease_expires_at = NULL, lease_sha256 = NULL,
            error_code = CASE WHEN e.timed_out THEN 'timed_out' ELSE 'lease_expired' END,
            error_message = CASE WHEN e.timed_out
                THEN format('the attempt ran past its job''s timeout_seconds (%%s)',
                            e.timeout_seconds)
                ELSE 'the lease expired before the worker reported a result' END,
            version = t.version + 1
        FROM expired e WHERE t.id = e.id
        RETURNING {}, e.lease_owner AS expired_owner
        """)
    .format(_T_COLUMNS)
    .as_string()
)


def expire(
    conn: Connection, job_id: UUID, *, now: datetime | None, lost_budget: int, limit: int = 500
) -> list[ExpiredLease]:
    """Take back a job's leases that ran out: pending while budgets remain, else failed.

    A lease that ran out at its attempt's deadline is the task's own doing (timed_out) and
    spends only an attempt; any other is a lost worker's (lease_expired) and spends the lost
    budget too. Either is retried at once: a timed-out attempt has already waited its timeout.
    The job is locked before its tasks, the order completions and cancels lock them in, and
    both with SKIP LOCKED: a sweep never waits, and a busy job's leases wait for the next pass.
    """
    rows = conn.execute(
        _EXPIRE,
        {"job": job_id, "now": now, "budget": lost_budget, "limit": limit},
    ).fetchall()
    return [ExpiredLease(from_row(Task, r), r["expired_owner"]) for r in rows]


_LIST_FOR_JOB = (
    sql.SQL("SELECT {} FROM tasks WHERE job_id = %(job)s ORDER BY chunk_index")
    .format(_COLUMNS)
    .as_string()
)


def list_for_job(conn: Connection, job_id: UUID) -> list[Task]:
    """A job's tasks in chunk order."""
    rows = conn.execute(_LIST_FOR_JOB, {"job": job_id}).fetchall()
    return [from_row(Task, r) for r in rows]


_CANCEL_UNFINISHED = sql.SQL("""
    WITH cancelled AS (
        UPDATE tasks SET status = 'cancelled', lease_owner = NULL, lease_expires_at = NULL,
            lease_sha256 = NULL,
            completed_at = now(), version = version + 1
        -- In id order, as batches of results and heartbeats lock tasks: two that wait for
        -- each other's rows would otherwise deadlock.
        WHERE id IN (SELECT id FROM tasks
                     WHERE job_id = ANY(%(jobs)s) AND chunk_index > %(after)s
                       AND status IN ('pending', 'leased')
                     ORDER BY id
                     {locking})
        RETURNING id
    ), closed AS (
        UPDATE task_attempts SET outcome = 'cancelled', finished_at = now()
        WHERE task_id IN (SELECT id FROM cancelled) AND outcome IS NULL
    ), marked AS (
        -- What was unfinished and is not cancelled now was skipped: cancel_strays ends it.
        UPDATE jobs j SET stray_tasks = true
        WHERE j.id = ANY(%(jobs)s) AND %(skip)s AND EXISTS (
            SELECT FROM tasks
            WHERE job_id = j.id AND chunk_index > %(after)s
              AND status IN ('pending', 'leased') AND id NOT IN (SELECT id FROM cancelled))
    )
    SELECT count(*) AS n FROM cancelled
""")


def cancel_unfinished(
    conn: Connection,
    job_ids: Collection[UUID],
    *,
    after_index: int = -1,
    skip_locked: bool = False,
) -> int:
    """Cancel these jobs' pending and leased tasks after a chunk index, closing their open
    attempts.

    skip_locked leaves alone the tasks another transaction is changing right now: a batch
    of results completing them, or a claim leasing them. A caller holding the job's lock
    must skip them, since that batch waits for the job next; the job is then marked as
    having stray tasks, for cancel_strays to end once the job is finished.
    """
    locking = sql.SQL("FOR UPDATE SKIP LOCKED" if skip_locked else "FOR UPDATE")
    query = _CANCEL_UNFINISHED.format(locking=locking)
    params = {"jobs": list(job_ids), "after": after_index, "skip": skip_locked}
    return conn.execute(query, params).fetchone()["n"]


def cancel_strays(conn: Connection, limit: int = 100) -> int:
    """Cancel the unfinished tasks of finished jobs marked as having stray tasks, and clear
    the mark of each job that has none left; return how many were cancelled.

    The jobs are locked, skipping any another transaction holds (a retry re-queueing them,
    which must not be undone), and their tasks likewise, so this never waits while holding a
    job: a batch of results holds its tasks and waits for the job. What is skipped now is
    taken by a later pass.
    """
    row = conn.execute(
        """
        WITH finished AS (
            SELECT id FROM jobs
            WHERE stray_tasks AND status IN ('succeeded', 'failed', 'cancelled')
            ORDER BY id
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ), cancelled AS (
            UPDATE tasks SET status = 'cancelled', lease_owner = NULL, lease_expires_at = NULL,
            lease_sha256 = NULL,
                completed_at = now(), version = version + 1
            WHERE id IN (SELECT t.id FROM tasks t
                         WHERE t.job_id IN (SELECT id FROM finished)
                           AND t.status IN ('pending', 'leased')
                         ORDER BY t.id
                         FOR UPDATE SKIP LOCKED)
            RETURNING id
        ), closed AS (
            UPDATE task_attempts SET outcome = 'cancelled', finished_at = now()
            WHERE task_id IN (SELECT id FROM cancelled) AND outcome IS NULL
        ), cleared AS (
            UPDATE jobs j SET stray_tasks = false
            WHERE j.id IN (SELECT id FROM finished) AND NOT EXISTS (
                SELECT FROM tasks t
                WHERE t.job_id = j.id AND t.status IN ('pending', 'leased')
                  AND t.id NOT IN (SELECT id FROM cancelled))
        )
        SELECT count(*) AS n FROM cancelled
        """,
        {"limit": limit},
    ).fetchone()
    return row["n"]


def requeue_unfinished(
    conn: Connection,
    budgets: Mapping[UUID, int],
    workload: str,
    *,
    queue_limit: int,
    first_tags: Mapping[int, int],
    blocked: bool = False,
) -> tuple[bool, int]:
    """Put these failed jobs' (of one workload) failed and cancelled tasks back to pending,
    each with its job's budget of attempts (or, `blocked`, waiting for the jobs it depends
    on), if the workload's queue bound leaves room for them all (see sql/0008), as admission
    does; numbered in each owner's line from `first_tags` (owner id -> first number, sql/0028),
    in job and chunk order, as admission numbers a job.

    Returns (fits, n): n tasks are to be requeued, and nothing is written unless they fit.
    The attempt counter keeps counting up: it is the fencing generation, so a retry must
    never reuse a number an old worker might still hold.
    """
    row = conn.execute(
        """
        WITH budget AS (
            SELECT * FROM unnest(%(jobs)s::uuid[], %(budgets)s::int[]) AS b(job_id, attempts)
        ), todo AS (
            SELECT count(*) AS n FROM tasks
            WHERE job_id = ANY(%(jobs)s) AND status IN ('failed', 'cancelled')
        ), room AS (
            UPDATE queue_bounds b SET unfinished = b.unfinished + todo.n
            FROM todo
            WHERE b.workload = %(workload)s AND b.unfinished + todo.n <= %(limit)s
            RETURNING b.workload
        ), numbered AS (
            SELECT t.id, budget.attempts,
                   coalesce(line.first_tag + row_number() OVER (
                       PARTITION BY j.owner_id ORDER BY j.created_at, j.id, t.chunk_index
                   ), t.fair_tag) AS fair_tag
            FROM tasks t
            JOIN budget ON budget.job_id = t.job_id
            JOIN jobs j ON j.id = t.job_id
            LEFT JOIN unnest(%(owners)s::bigint[], %(first_tags)s::bigint[])
                 AS line(owner_id, first_tag) ON line.owner_id = j.owner_id
            WHERE t.job_id = ANY(%(jobs)s) AND t.status IN ('failed', 'cancelled')
        ), requeued AS (
            UPDATE tasks t SET status = 'pending', max_attempts = t.attempt + n.attempts,
                lost_retries = 0, read_retries = 0, lease_owner = NULL,
                lease_expires_at = NULL, completed_at = NULL, not_before = %(not_before)s,
                fair_tag = n.fair_tag, version = t.version + 1
            FROM numbered n
            WHERE t.id = n.id AND EXISTS (SELECT FROM room)
        )
        SELECT EXISTS (SELECT FROM room) AS fits, (SELECT n FROM todo) AS n
        """,
        {
            "jobs": list(budgets),
            "budgets": list(budgets.values()),
            "workload": workload,
            "limit": queue_limit,
            "not_before": BLOCKED if blocked else None,
            "owners": list(first_tags),
            "first_tags": list(first_tags.values()),
        },
    ).fetchone()
    return row["fits"], row["n"]


def release_blocked(conn: Connection, job_ids: Sequence[UUID]) -> int:
    """Let go the waiting tasks of those of these jobs whose every prerequisite has succeeded
    (to their job's own schedule, if that is still ahead); how many were let go.

    Read in a statement of its own, after the caller has taken each job's dependency turn,
    so the prerequisites' statuses are the ones committed by then (see services/settlement).
    """
    row = conn.execute(
        """
        WITH ready AS (
            SELECT j.id, j.not_before FROM jobs j
            WHERE j.id = ANY(%(ids)s)
              AND NOT EXISTS (SELECT FROM jobs p
                              WHERE p.id = ANY(j.depends_on) AND p.status <> 'succeeded')
        ), released AS (
            UPDATE tasks t SET not_before = CASE WHEN r.not_before > now() THEN r.not_before END
            FROM ready r
            WHERE t.job_id = r.id AND t.status = 'pending' AND t.not_before = %(forever)s
            RETURNING t.id
        )
        SELECT count(*) AS n FROM released
        """,
        {"ids": list(job_ids), "forever": BLOCKED},
    ).fetchone()
    if row["n"]:
        # Not a change of status, so the task triggers stay silent: waiting claims are told here.
        conn.execute("SELECT pg_notify(%(channel)s, '')", {"channel": channels.CLAIMABLE})
    return row["n"]
