"""JSON the coordinator keeps for a task: its arguments, and its stored result value.

Both are kept as their canonical JSON text, the bytes their SHA-256 digests are taken over:
whoever reads them back (a worker checking input_sha256, a caller checking result_sha256)
hashes exactly what it was served, and no second canonical form is ever computed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING
from uuid import UUID

from psycopg import Connection

from repositories import jobs as job_rows
from repositories import task_values as value_rows
from repositories import tasks as task_rows
from repositories.task_values import ResultPage
from services.auth import Principal
from services.errors import InvalidInput, NotFound

if TYPE_CHECKING:  # services.runtime holds the Workloads, whose rules use JsonValue
    from services.runtime import Runtime

# A task's arguments: room for real arguments; larger inputs belong at an input_uri.
MAX_ARGS_BYTES = 1024 * 1024
# Where the task API serves a stored result (result_uri names it).
RESULT_PATH = "/api/v1/tasks/{task_id}/result"
# A page of a job's results ends with the value that takes it past this many bytes of values
# and metrics: each value may be up to CHUNKWISE_MAX_RESULT_BYTES, and a page holds up to
# 10,000 of them.
MAX_RESULT_PAGE_BYTES = 8 * 1024 * 1024


class ResultTooLarge(InvalidInput):
    """A result value's canonical JSON is over CHUNKWISE_MAX_RESULT_BYTES."""

    code = "result_too_large"


@dataclass(frozen=True)
class JsonValue:
    """A JSON value a request gave: None here is JSON null, not an absent value."""

    value: object


@dataclass(frozen=True)
class CanonicalJson:
    """A JSON value's canonical text and the hex SHA-256 of its UTF-8 bytes."""

    text: str
    sha256: str

    @property
    def size(self) -> int:
        """Its length in UTF-8 bytes."""
        return len(self.text.encode())


def canonical(value: object) -> CanonicalJson:
    """The canonical JSON of a value: sorted keys, no spaces, UTF-8 rather than escapes."""
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return CanonicalJson(text, hashlib.sha256(text.encode()).hexdigest())


def task_args(value: object, field: str) -> CanonicalJson:
    """A task's arguments as stored; InvalidInput naming `field` when they are too large."""
    args = canonical(value)
    if args.size > MAX_ARGS_BYTES:
        raise InvalidInput.field(
            field, f"must be at most {MAX_ARGS_BYTES} bytes of JSON, got {args.size}"
        )
    return args


def inline_input_uri(task_id: UUID) -> str:
    """The input_uri of a task whose input is its arguments."""
    return f"inline:{task_id}"


def result_value(value: JsonValue, limit: int) -> CanonicalJson:
    """A result value as stored; ResultTooLarge when it is over `limit` bytes."""
    stored = canonical(value.value)
    if stored.size > limit:
        message = f"must be at most {limit} bytes of JSON, got {stored.size}"
        raise ResultTooLarge(
            f"value: {message}",
            details={"fields": {"value": [message]}, "limit": limit, "size": stored.size},
        )
    return stored


def result_uri(task_id: UUID) -> str:
    """Where the task API serves a task's stored result."""
    return RESULT_PATH.format(task_id=task_id)


def list_completed_results(
    rt: Runtime, principal: Principal, job_id: UUID, *, after_index: int = -1, limit: int = 1000
) -> ResultPage:
    """Up to `limit` completed tasks of a job in chunk order, from the first past
    `after_index`, each with its stored value if it has one, for the stitcher: fewer when
    their values pass MAX_RESULT_PAGE_BYTES."""
    with rt.pool.connection() as conn:
        if not _visible(conn, principal, job_id):
            raise NotFound(f"job {job_id} does not exist")
        return value_rows.page_for_job(
            conn,
            job_id,
            after_index=after_index,
            limit=limit,
            max_bytes=MAX_RESULT_PAGE_BYTES,
        )


def stored_result(rt: Runtime, principal: Principal, task_id: UUID) -> str:
    """A task's stored result value as its canonical JSON text, to its job's owner only."""
    with rt.pool.connection() as conn:
        task = task_rows.get(conn, task_id)
        # Said alike whether or not the task exists, and without its job's id.
        if task is None or not _visible(conn, principal, task.job_id):
            raise NotFound(f"task {task_id} does not exist")
        text = value_rows.get(conn, task_id)
    if text is None:
        raise NotFound(f"task {task_id} has no stored result", code="no_stored_result")
    return text


def _visible(conn: Connection, principal: Principal, job_id: UUID) -> bool:
    # As services.jobs.visible_job decides, which this module cannot import: jobs imports it.
    return job_rows.get(conn, job_id, owner_id=principal.visible_owner) is not None
