"""Jobs: creation, locking, status transitions and listing."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from psycopg import Connection, sql
from psycopg.types.json import Jsonb

from repositories import columns, from_row
from repositories.tasks import BLOCKED, NewTask


@dataclass(frozen=True)
class Job:
    """A job row."""

    id: UUID
    owner_id: int
    workload: str
    input_uri: str
    input_sha256: str | None
    parameters: dict
    labels: dict
    priority: int
    status: str
    revision: int
    chunks_total: int
    result: dict | None
    partial_result: dict | None
    error: dict | None
    merge_seconds: float | None
    idempotency_key: str | None
    request_sha256: str | None
    trace_id: str
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    chunks_completed: int
    max_attempts: int | None  # None for jobs admitted before sql/0012
    not_before: datetime | None = None  # a scheduled job's tasks wait until then (sql/0020)
    timeout_seconds: int | None = None  # the longest one attempt at a task may run (sql/0021)
    depends_on: list[UUID] | None = None  # the jobs that must succeed first (sql/0023)


# What the statements return of a job: named, so a new column leaves them be once they are
# prepared (repositories/__init__.py). As `j` where another relation shares a column name.
_COLUMNS = columns(Job)
_J_COLUMNS = columns(Job, "j")

# A listed job's error message is cut to this many characters (a worker's may be 4,000 and
# the coordinator prefixes its own words).
SUMMARY_MESSAGE_CHARS = 4200


@dataclass(frozen=True)
class JobSummary:
    """A job as lists show it: a row without its unbounded payloads.

    No parameters, result or partial result (each up to the 4 MiB body limit), and an error
    cut to its code and message (a failure's details are a worker's, up to 4 MiB too): a page
    of 200 such rows stays under a few hundred KiB, however large the jobs are.
    """

    id: UUID
    owner_id: int
    workload: str
    input_uri: str
    input_sha256: str | None
    labels: dict
    priority: int
    status: str
    revision: int
    chunks_total: int
    error: dict | None
    merge_seconds: float | None
    trace_id: str
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    chunks_completed: int
    max_attempts: int | None
    not_before: datetime | None
    timeout_seconds: int | None
    depends_on: list[UUID] | None


@dataclass(frozen=True)
class NewJob:
    """What create_job inserts."""

    id: UUID
    owner_id: int
    workload: str
    input_uri: str
    input_sha256: str | None
    parameters: dict
    labels: dict
    priority: int
    chunks_total: int
    idempotency_key: str | None
    request_sha256: str | None
    trace_id: str
    max_attempts: int
    not_before: datetime | None = None
    timeout_seconds: int | None = None
    depends_on: list[UUID] | None = None


@dataclass(frozen=True)
class ChunkCounts:
    """How many of a job's tasks are in each state."""

    pending: int = 0
    leased: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0


# The bytes a new job stores as its owner's bounds count them: its parameters and labels and
# its tasks' parameters, as PostgreSQL writes them out.
_SIZE = sql.SQL("""
SELECT octet_length(%(parameters)s::jsonb::text) + octet_length(%(labels)s::jsonb::text)
  + (SELECT coalesce(sum(octet_length(p::text)), 0)
     FROM unnest(%(task_parameters)b::jsonb[]) AS p)
  + (SELECT coalesce(sum(octet_length(a)), 0)
     FROM unnest(%(task_args)b::text[]) AS a) AS bytes
""")
# The workload's virtual time (sql/0028): its head's number at this priority, or, with none
# queued there, the last number any owner took. MATERIALIZED in the admission: _NEXT_TAG names
# it twice, and inlined it was planned and looked up twice.
_CLOCK = sql.SQL("""
SELECT coalesce(
    (SELECT t.fair_tag FROM tasks t
     WHERE t.status = 'pending' AND t.workload = %(workload)s
       AND t.not_before IS NULL AND t.priority = %(priority)s
     ORDER BY t.fair_tag LIMIT 1),
    (SELECT max(last_tag) FROM user_bounds WHERE workload = %(workload)s),
    0) AS now
""")
# Where an owner's next numbers start: after its last, but at most its share past the head,
# so one who cancelled a backlog is not sent behind the tasks it no longer has.
_NEXT_TAG = sql.SQL("greatest(clock.now, least(u.last_tag, clock.now + %(user_limit)s))")


# Admission in one statement. The owner's row (share) is locked first, then the workload's
# (room): every writer of both takes them in this order, and FOR UPDATE reads the row's latest
# version once it is locked. A not_before already past leaves the tasks with the ready ones
# (sql/0019); tasks are numbered in chunk order, the order a job's own tasks are claimed in;
# the job.created event carries not_before only for a scheduled job and depends_on only for a
# dependent one. Composed once, and short enough (under 4 KiB) for psycopg to keep its parsed
# form rather than parse it again on every admission (tests/unit/test_statements.py).
_ADMIT = (
    sql.SQL("""
WITH size AS ({size}), share AS (
  SELECT u.last_tag FROM user_bounds u, size
  WHERE u.workload = %(workload)s AND u.owner_id = %(owner_id)s
    AND u.unfinished + %(n)s <= %(user_limit)s
    AND u.stored_bytes + size.bytes <= %(byte_limit)s
  FOR UPDATE OF u
), room AS (
  UPDATE queue_bounds SET unfinished = unfinished + %(n)s
  WHERE workload = %(workload)s AND unfinished + %(n)s <= %(limit)s
    AND EXISTS (SELECT FROM share)
  RETURNING workload
), clock AS MATERIALIZED ({clock}), taken AS (
  UPDATE user_bounds u SET unfinished = u.unfinished + %(n)s,
    stored_bytes = u.stored_bytes + size.bytes, last_tag = {next_tag} + %(n)s
  FROM room, clock, size
  WHERE u.workload = %(workload)s AND u.owner_id = %(owner_id)s
  RETURNING u.last_tag - %(n)s AS first_tag
), job AS (
  INSERT INTO jobs (id, owner_id, workload, input_uri, input_sha256, parameters,
                    labels, priority, chunks_total, idempotency_key, request_sha256,
                    trace_id, max_attempts, not_before, timeout_seconds, depends_on)
  SELECT %(id)s, %(owner_id)s, %(workload)s, %(input_uri)s, %(input_sha256)s,
         %(parameters)s, %(labels)s, %(priority)s, %(chunks_total)s,
         %(idempotency_key)s, %(request_sha256)s, %(trace_id)s, %(max_attempts)s,
         %(not_before)s, %(timeout_seconds)s, %(depends_on)s
  FROM taken
  ON CONFLICT ON CONSTRAINT jobs_idempotency_key DO NOTHING
  RETURNING *
), tasks AS (
  INSERT INTO tasks (id, job_id, chunk_index, workload, priority, input_uri,
                     input_sha256, parameters, max_attempts, not_before,
                     timeout_seconds, fair_tag, args)
  SELECT t.id, job.id, t.chunk_index, %(workload)s, %(priority)s, t.input_uri,
         t.input_sha256, t.parameters, t.max_attempts,
         CASE WHEN %(blocked)s THEN %(forever)s
              WHEN job.not_before > now() THEN job.not_before END,
         job.timeout_seconds,
         taken.first_tag + row_number() OVER (ORDER BY t.chunk_index),
         t.args
  FROM job, taken,
       unnest(%(task_ids)b::uuid[], %(indexes)b::int[], %(uris)b::text[],
              %(shas)b::text[], %(task_parameters)b::jsonb[],
              %(task_max_attempts)b::int[], %(task_args)b::text[])
       AS t(id, chunk_index, input_uri, input_sha256, parameters, max_attempts, args)
), announced AS (
  INSERT INTO outbox (job_id, owner_id, event, payload, trace_id)
  SELECT job.id, job.owner_id, 'job.created',
         jsonb_strip_nulls(jsonb_build_object('chunks_total', job.chunks_total,
                                              'workload', job.workload,
                                              'not_before', job.not_before,
                                              'depends_on', job.depends_on)),
         job.trace_id
  FROM job
), audited AS (
  INSERT INTO audit_log (actor, action, target, trace_id)
  SELECT %(actor)s, 'job.create', job.id::text, job.trace_id FROM job
)
SELECT EXISTS (SELECT FROM taken) AS fits, {columns}
FROM (VALUES (1)) AS one LEFT JOIN job ON true
""")
    .format(size=_SIZE, clock=_CLOCK, next_tag=_NEXT_TAG, columns=_COLUMNS)
    .as_string()
)


def admit_job(
    conn: Connection,
    job: NewJob,
    tasks: Sequence[NewTask],
    *,
    queue_limit: int,
    user_limit: int,
    byte_limit: int,
    actor: str,
    blocked: bool = False,
) -> tuple[bool, Job | None]:
    """Insert a queued job, its pending tasks (a job may have 10,000), its `job.created` event
    and its audit row in one statement, if its workload's queue bound and its owner's bounds
    (sql/0028) leave room for them.

    One statement, so an admission with nothing else to do commits on its own in one round
    trip. Returns (fits, job): fits is False when a bound leaves no room (or the workload or
    the owner has none yet), and nothing is written; job is None when the owner's idempotency
    key is taken, by a request that committed while this one was being admitted. A `blocked`
    job's tasks wait for the jobs it depends on (tasks.BLOCKED). The tasks are numbered in
    the workload's fair order from the later of the owner's last number and the number of the
    workload's head at the job's priority, so claims interleave owners.
    """
    row = conn.execute(
        _ADMIT,
        {
            **job.__dict__,
            "parameters": Jsonb(job.parameters),
            "labels": Jsonb(job.labels),
            "n": len(tasks),
            "limit": queue_limit,
            "user_limit": user_limit,
            "byte_limit": byte_limit,
            "actor": actor,
            "blocked": blocked,
            "forever": BLOCKED,
            "task_ids": [t.id for t in tasks],
            "indexes": [t.chunk_index for t in tasks],
            "uris": [t.input_uri for t in tasks],
            "shas": [t.input_sha256 for t in tasks],
            "task_parameters": [Jsonb(t.parameters) for t in tasks],
            "task_max_attempts": [t.max_attempts for t in tasks],
            "task_args": [t.args for t in tasks],
        },
        prepare=True,
    ).fetchone()
    return row["fits"], from_row(Job, row) if row["id"] is not None else None


@dataclass(frozen=True)
class OwnerUsage:
    """What one owner's unfinished work in a workload holds, counted (sql/0028)."""

    unfinished: int
    stored_bytes: int


def recount_owner(conn: Connection, workload: str, owner_id: int) -> OwnerUsage:
    """Count an owner's unfinished tasks in a workload and the bytes of parameters, args and
    labels its unfinished jobs there store, and start its bounds again from there.

    Two statements, as tasks.recount_unfinished: the count is taken once the row is locked,
    and the caller's transaction keeps the lock, so no admission of the owner's in the
    workload overtakes the count until it commits. Take it before the workload's bound.
    """
    conn.execute(
        """
        INSERT INTO user_bounds (workload, owner_id, unfinished, stored_bytes)
        VALUES (%(workload)s, %(owner)s, 0, 0)
        ON CONFLICT (workload, owner_id) DO UPDATE SET unfinished = user_bounds.unfinished
        """,
        {"workload": workload, "owner": owner_id},
    )
    # The owner's unfinished jobs from jobs_owner_status_created_idx, their tasks by job.
    row = conn.execute(
        """
        WITH mine AS (
            SELECT id, octet_length(parameters::text) + octet_length(labels::text) AS bytes
            FROM jobs
            WHERE owner_id = %(owner)s AND status IN ('queued', 'running', 'merging')
              AND workload = %(workload)s
        ), counted AS (
            SELECT count(*) FILTER (WHERE t.status IN ('pending', 'leased')) AS unfinished,
                   coalesce(sum(octet_length(t.parameters::text)
                                + coalesce(octet_length(t.args), 0)), 0) AS bytes
            FROM mine JOIN tasks t ON t.job_id = mine.id
        )
        UPDATE user_bounds SET unfinished = counted.unfinished,
            stored_bytes = counted.bytes + (SELECT coalesce(sum(bytes), 0) FROM mine)
        FROM counted
        WHERE workload = %(workload)s AND owner_id = %(owner)s
        RETURNING user_bounds.unfinished, user_bounds.stored_bytes
        """,
        {"workload": workload, "owner": owner_id},
    ).fetchone()
    return from_row(OwnerUsage, row)


def stored_bytes(conn: Connection, job: NewJob, tasks: Sequence[NewTask]) -> int:
    """The bytes a new job would store, as its owner's bounds count them."""
    return conn.execute(
        _SIZE,
        {
            "parameters": Jsonb(job.parameters),
            "labels": Jsonb(job.labels),
            "task_parameters": [Jsonb(t.parameters) for t in tasks],
            "task_args": [t.args for t in tasks],
        },
    ).fetchone()["bytes"]


def raise_owner_bounds(
    conn: Connection, jobs: Sequence[Job], workload: str, *, user_limit: int
) -> dict[int, int]:
    """Raise the bounds of these failed jobs' owners by the tasks a retry is about to re-queue
    and the bytes the jobs store, keeping them above the true counts, and take each owner's
    next numbers for those tasks, as admission would at the first job's priority; take this
    before the workload's bound. Returns each owner's first number (an owner with no bounds
    yet is left out: its tasks keep theirs)."""
    rows = conn.execute(
        sql.SQL("""
        WITH owners AS (
            SELECT j.owner_id,
                   sum(t.n) AS n,
                   sum(octet_length(j.parameters::text) + octet_length(j.labels::text)
                       + t.bytes) AS bytes
            FROM jobs j
            CROSS JOIN LATERAL (
                SELECT count(*) FILTER (WHERE status IN ('failed', 'cancelled')) AS n,
                       coalesce(sum(octet_length(parameters::text)
                                    + coalesce(octet_length(args), 0)), 0) AS bytes
                FROM tasks WHERE job_id = j.id) AS t
            WHERE j.id = ANY(%(jobs)s)
            GROUP BY j.owner_id
        ), locked AS (
            SELECT u.owner_id FROM user_bounds u
            WHERE u.workload = %(workload)s AND u.owner_id IN (SELECT owner_id FROM owners)
            ORDER BY u.owner_id
            FOR UPDATE
        ), clock AS ({clock})
        UPDATE user_bounds u SET unfinished = u.unfinished + owners.n,
            stored_bytes = u.stored_bytes + owners.bytes, last_tag = {next_tag} + owners.n
        FROM owners, clock
        WHERE u.workload = %(workload)s AND u.owner_id = owners.owner_id
          AND u.owner_id IN (SELECT owner_id FROM locked)
        RETURNING u.owner_id, u.last_tag - owners.n AS first_tag
        """).format(clock=_CLOCK, next_tag=_NEXT_TAG),
        {
            "jobs": [j.id for j in jobs],
            "workload": workload,
            "priority": jobs[0].priority,
            "user_limit": user_limit,
        },
    ).fetchall()
    return {r["owner_id"]: r["first_tag"] for r in rows}


_LOCK_PREREQUISITES = (
    sql.SQL("""
        SELECT {} FROM jobs
        WHERE id = ANY(%(ids)s) AND (%(owner)s::bigint IS NULL OR owner_id = %(owner)s)
        ORDER BY created_at, id
        FOR SHARE
        """)
    .format(_COLUMNS)
    .as_string()
)


def lock_prerequisites(conn: Connection, ids: Sequence[UUID], owner_id: int | None) -> list[Job]:
    """Those of these jobs the owner may see (None: anyone's), locked so that none changes
    status until the caller commits: a job admitted to wait for one is then seen by its
    finish. In the order they were created, as lock_many locks."""
    rows = conn.execute(_LOCK_PREREQUISITES, {"ids": list(ids), "owner": owner_id}).fetchall()
    return [from_row(Job, r) for r in rows]


def statuses(
    conn: Connection, ids: Collection[UUID], owner_id: int | None = None
) -> dict[UUID, str]:
    """These jobs' statuses, the owner's only (None: anyone's); a job retention deleted is
    left out."""
    rows = conn.execute(
        """
        SELECT id, status FROM jobs
        WHERE id = ANY(%(ids)s) AND (%(owner)s::bigint IS NULL OR owner_id = %(owner)s)
        """,
        {"ids": list(ids), "owner": owner_id},
    ).fetchall()
    return {r["id"]: r["status"] for r in rows}


def dependents(conn: Connection, job_ids: Collection[UUID], limit: int | None = None) -> list[UUID]:
    """The jobs that depend on any of these, finished or not, in id order (jobs_dependents_idx);
    the first `limit` of them if given."""
    rows = conn.execute(
        """
        SELECT id FROM jobs
        WHERE depends_on IS NOT NULL AND depends_on && %(ids)s::uuid[]
        ORDER BY id
        LIMIT %(limit)s
        """,
        {"ids": list(job_ids), "limit": limit},
    ).fetchall()
    return [r["id"] for r in rows]


def failed_dependents(conn: Connection, job_ids: Collection[UUID]) -> list[UUID]:
    """The jobs depending on any of these that failed because a job they depend on did, in id
    order (jobs_dependents_idx)."""
    rows = conn.execute(
        """
        SELECT id FROM jobs
        WHERE depends_on IS NOT NULL AND depends_on && %(ids)s::uuid[]
          AND status = 'failed' AND error->>'code' = 'dependency_failed'
        ORDER BY id
        """,
        {"ids": list(job_ids)},
    ).fetchall()
    return [r["id"] for r in rows]


_BY_IDEMPOTENCY_KEY = (
    sql.SQL("SELECT {} FROM jobs WHERE owner_id = %(owner)s AND idempotency_key = %(key)s")
    .format(_COLUMNS)
    .as_string()
)


def find_by_idempotency_key(conn: Connection, owner_id: int, key: str) -> Job | None:
    """Return the owner's job created with this key."""
    row = conn.execute(_BY_IDEMPOTENCY_KEY, {"owner": owner_id, "key": key}).fetchone()
    return from_row(Job, row) if row else None


_GET_ONE = sql.SQL("""
    SELECT {columns} FROM jobs
    WHERE id = %(id)s AND (%(owner)s::bigint IS NULL OR owner_id = %(owner)s)
    {lock}""")
_GET = _GET_ONE.format(columns=_COLUMNS, lock=sql.SQL("")).as_string()
_GET_FOR_UPDATE = _GET_ONE.format(columns=_COLUMNS, lock=sql.SQL("FOR UPDATE")).as_string()


def get(
    conn: Connection, job_id: UUID, *, owner_id: int | None = None, for_update: bool = False
) -> Job | None:
    """Return a job (only the owner's when owner_id is given), optionally locked."""
    query = _GET_FOR_UPDATE if for_update else _GET
    row = conn.execute(query, {"id": job_id, "owner": owner_id}).fetchone()
    return from_row(Job, row) if row else None


_LOCK_MANY = (
    sql.SQL("SELECT {} FROM jobs WHERE id = ANY(%(ids)s) ORDER BY created_at, id FOR UPDATE")
    .format(_COLUMNS)
    .as_string()
)


def lock_many(conn: Connection, job_ids: Collection[UUID]) -> list[Job]:
    """These jobs, locked in the order they were created: a job is created after the jobs it
    depends on, so every transaction locking jobs of one graph locks them in one order."""
    rows = conn.execute(_LOCK_MANY, {"ids": list(job_ids)}).fetchall()
    return [from_row(Job, r) for r in rows]


_COUNT_COMPLETED = (
    sql.SQL(
        "UPDATE jobs SET chunks_completed = chunks_completed + %(n)s WHERE id = %(id)s RETURNING {}"
    )
    .format(_COLUMNS)
    .as_string()
)


def count_completed(conn: Connection, job_id: UUID, completed: int) -> Job:
    """Add just-completed tasks to a (locked) job's counter and return the job."""
    row = conn.execute(_COUNT_COMPLETED, {"id": job_id, "n": completed}, prepare=True).fetchone()
    return from_row(Job, row)


def chunk_counts(conn: Connection, job_ids: list[UUID]) -> dict[UUID, ChunkCounts]:
    """Each job's tasks by state, summed from its tallies (sql/0016)."""
    rows = conn.execute(
        """
        SELECT job_id, status, sum(n)::bigint AS n FROM job_tallies
        WHERE job_id = ANY(%(ids)b)
        GROUP BY job_id, status HAVING sum(n) <> 0
        """,
        {"ids": job_ids},
    ).fetchall()
    by_job: dict[UUID, dict[str, int]] = {job_id: {} for job_id in job_ids}
    for r in rows:
        by_job[r["job_id"]][r["status"]] = r["n"]
    return {job_id: ChunkCounts(**counts) for job_id, counts in by_job.items()}


def fold_chunk_tallies(conn: Connection, limit: int = 200_000) -> None:
    """Fold up to `limit` rows of the jobs' tallies into one row per job and state.

    As the queue's fold (repositories/queue.py): no sum changes, and a deleted job's rows,
    which sum to zero, go.
    """
    conn.execute(
        """
        WITH folded AS (
            DELETE FROM job_tallies
            WHERE ctid = ANY (ARRAY(SELECT ctid FROM job_tallies LIMIT %(limit)s))
            RETURNING job_id, status, n
        )
        INSERT INTO job_tallies (job_id, status, n)
        SELECT job_id, status, sum(n) FROM folded
        GROUP BY job_id, status HAVING sum(n) <> 0
        """,
        {"limit": limit},
    )


def list_jobs(
    conn: Connection,
    *,
    owner_id: int | None,
    status: str | None,
    limit: int,
    before: tuple[datetime, UUID] | None,
    label: tuple[str, str] | None = None,
    owner_name: str | None = None,
    workload: str | None = None,
    depends_on: UUID | None = None,
) -> list[JobSummary]:
    """List jobs newest first, after a keyset cursor, optionally filtered (a user no one is
    named owns nothing; `depends_on`: the jobs that wait for that one, jobs_dependents_idx).

    The payload columns are never read: PostgreSQL does not even detoast them.
    """
    rows = conn.execute(
        """
        SELECT id, owner_id, workload, input_uri, input_sha256, labels, priority, status,
               revision, chunks_total, merge_seconds, trace_id, created_at, started_at,
               completed_at, chunks_completed, max_attempts, not_before, timeout_seconds,
               depends_on,
               CASE WHEN error IS NOT NULL
                    THEN jsonb_build_object('code', error -> 'code',
                                            'message', left(error ->> 'message', %(message)s))
               END AS error
        FROM jobs
        WHERE (%(owner)s::bigint IS NULL OR owner_id = %(owner)s)
          AND (%(owner_name)s::text IS NULL
               OR owner_id = (SELECT id FROM users WHERE name = %(owner_name)s))
          AND (%(status)s::text IS NULL OR status = %(status)s)
          AND (%(workload)s::text IS NULL OR workload = %(workload)s)
          AND (%(label)s::jsonb IS NULL OR labels @> %(label)s::jsonb)
          AND (%(depends_on)s::uuid IS NULL
               OR (depends_on IS NOT NULL AND depends_on @> ARRAY[%(depends_on)s::uuid]))
          AND (%(before_at)s::timestamptz IS NULL
               OR (created_at, id) < (%(before_at)s::timestamptz, %(before_id)s::uuid))
        ORDER BY created_at DESC, id DESC
        LIMIT %(limit)s
        """,
        {
            "owner": owner_id,
            "owner_name": owner_name,
            "status": status,
            "workload": workload,
            "label": Jsonb({label[0]: label[1]}) if label else None,
            "depends_on": depends_on,
            "before_at": before[0] if before else None,
            "before_id": before[1] if before else None,
            "limit": limit,
            "message": SUMMARY_MESSAGE_CHARS,
        },
    ).fetchall()
    return [from_row(JobSummary, r) for r in rows]


_SET_STATUS = (
    sql.SQL("""
        UPDATE jobs SET status = %(status)s,
            revision = revision + 1,
            error = %(error)s,
            result = %(result)s,
            partial_result = %(partial)s,
            merge_seconds = COALESCE(%(merge_seconds)s, merge_seconds),
            started_at = CASE WHEN %(status)s = 'queued' THEN started_at
                              ELSE COALESCE(started_at, now()) END,
            completed_at = CASE WHEN %(status)s IN ('succeeded', 'failed', 'cancelled')
                                THEN now() END
        WHERE id = %(id)s
        RETURNING {}
        """)
    .format(_COLUMNS)
    .as_string()
)


def set_status(
    conn: Connection,
    job_id: UUID,
    status: str,
    *,
    error: dict | None = None,
    result: dict | None = None,
    partial_result: dict | None = None,
    merge_seconds: float | None = None,
) -> Job:
    """Move a (locked) job to a new status, bumping its revision."""
    row = conn.execute(
        _SET_STATUS,
        {
            "id": job_id,
            "status": status,
            "error": Jsonb(error) if error is not None else None,
            "result": Jsonb(result) if result is not None else None,
            "partial": Jsonb(partial_result) if partial_result is not None else None,
            "merge_seconds": merge_seconds,
        },
    ).fetchone()
    return from_row(Job, row)


_FAIL_MANY = (
    sql.SQL("""
        UPDATE jobs j SET status = 'failed',
            revision = revision + 1,
            error = e.error,
            result = NULL,
            partial_result = NULL,
            started_at = COALESCE(started_at, now()),
            completed_at = now()
        FROM unnest(%(ids)s::uuid[], %(errors)s::jsonb[]) AS e(id, error)
        WHERE j.id = e.id
        RETURNING {}
        """)
    .format(_J_COLUMNS)
    .as_string()
)


def fail_many(conn: Connection, errors: Mapping[UUID, dict]) -> list[Job]:
    """Fail these (locked) jobs, each with its error, as set_status would; in the order given."""
    rows = conn.execute(
        _FAIL_MANY,
        {"ids": list(errors), "errors": [Jsonb(e) for e in errors.values()]},
    ).fetchall()
    return _in_order(rows, errors)


_REQUEUE_MANY = (
    sql.SQL("""
        UPDATE jobs SET status = 'queued', revision = revision + 1, error = NULL, result = NULL,
            partial_result = NULL, completed_at = NULL
        WHERE id = ANY(%(ids)s)
        RETURNING {}
        """)
    .format(_COLUMNS)
    .as_string()
)


def requeue_many(conn: Connection, job_ids: Collection[UUID]) -> list[Job]:
    """Put these (locked) failed jobs back in the queue, as set_status would; in the order
    given."""
    rows = conn.execute(_REQUEUE_MANY, {"ids": list(job_ids)}).fetchall()
    return _in_order(rows, job_ids)


def _in_order(rows: list[dict], job_ids: Collection[UUID]) -> list[Job]:
    """The jobs of an UPDATE's RETURNING rows (in no order), in the order of `job_ids`."""
    by_id = {r["id"]: r for r in rows}
    return [from_row(Job, by_id[i]) for i in job_ids if i in by_id]


def merging_jobs(conn: Connection, limit: int = 20) -> list[tuple[UUID, str]]:
    """Jobs waiting for their merge, with their workloads (the maintenance loop's safety net)."""
    rows = conn.execute(
        """
        SELECT id, workload FROM jobs WHERE status = 'merging'
        ORDER BY created_at LIMIT %(limit)s
        """,
        {"limit": limit},
    ).fetchall()
    return [(r["id"], r["workload"]) for r in rows]


def referenced_inputs(conn: Connection, digests: Sequence[str]) -> set[str]:
    """Which of these input digests some job still refers to."""
    # No index on input_sha256: the archive sweep asks this once an hour, a page at a time.
    rows = conn.execute(
        "SELECT DISTINCT input_sha256 FROM jobs WHERE input_sha256 = ANY(%(digests)s)",
        {"digests": list(digests)},
    ).fetchall()
    return {r["input_sha256"] for r in rows}


def delete_finished(
    conn: Connection, *, older_than_days: int, limit: int = 1000, task_budget: int = 50_000
) -> int:
    """Delete the jobs finished more than N days ago, oldest first, with their tasks and events:
    up to `limit` jobs, and no more after their tasks reach `task_budget` (the first always).

    The budget keeps one pass's delete within the statement timeout, which a thousand jobs of
    10,000 tasks each would not be; the next pass goes on from there.
    """
    cur = conn.execute(
        """
        DELETE FROM jobs WHERE id IN (
            SELECT id FROM (
                SELECT id, sum(chunks_total) OVER (ORDER BY completed_at, id)
                           - chunks_total AS tasks_before
                FROM (SELECT id, completed_at, chunks_total FROM jobs
                      WHERE status IN ('succeeded', 'failed', 'cancelled')
                        AND completed_at < now() - make_interval(days => %(days)s)
                      ORDER BY completed_at
                      LIMIT %(limit)s
                      FOR UPDATE SKIP LOCKED) AS due
            ) AS budgeted
            WHERE tasks_before < %(budget)s
        )
        """,
        {"days": older_than_days, "limit": limit, "budget": task_budget},
    )
    return cur.rowcount
