"""HTTP client for the coordinator: one session, a timeout on every call, status -> exception."""

from __future__ import annotations

import email.utils
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator
from typing import BinaryIO
from urllib.parse import quote, urlencode, urljoin, urlsplit

import requests

from worker_cli.uploads import FileBody, MultipartUpload

DEFAULT_TIMEOUT = 10.0
# A long poll (a claim, a job watch) legitimately takes wait_seconds; the margin covers the
# round trip and a coordinator that answers a little late, so a normal empty poll never looks
# like a timeout.
LONG_POLL_MARGIN = 10.0
INPUT_BLOCK_SIZE = 1024 * 1024
# The coordinator answers an upload only after hashing and splitting it (up to 50 MiB).
UPLOAD_TIMEOUT = 300.0
# Query bytes a text/csv upload may use: gunicorn takes a request line of 8,190 bytes (see
# gunicorn.conf.py), of which the method, path and protocol take a few dozen.
QUERY_BUDGET = 8000

# Answers of a coordinator (or of the proxy in front of it) that is briefly unable to serve.
BLIP_STATUSES = frozenset({429, 502, 503, 504})
STORAGE_FAILURE_CODES = frozenset({"insufficient_storage", "storage_unavailable"})

_TRACE_ID = re.compile(r"[0-9a-f]{32}")
# What an Authorization header can carry as a bearer token (RFC 6750's b64token and more).
_TOKEN = re.compile(r"[!-~]+")
_RANGE_START = re.compile(r"bytes (\d+)-")
# The outcomes each batch endpoint may answer an item with (app/schemas/tasks.py).
BATCH_OUTCOMES = {
    "results": frozenset({"accepted", "replayed", "rejected"}),
    "heartbeats": frozenset({"renewed", "rejected"}),
}
# Failures of the network or of the peer, as opposed to a malformed URL or request (bugs).
_UNREACHABLE = (
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
)


# Where the input's GET carries its lease's secret token (the other task calls, in the body).
LEASE_TOKEN_HEADER = "Chunkwise-Lease-Token"


def new_trace_id() -> str:
    """Return a fresh W3C trace id (32 lowercase hex digits)."""
    return secrets.token_hex(16)


def traceparent(trace_id: str | None) -> str:
    """Return a W3C traceparent header for the trace, with a fresh span id."""
    return f"00-{_normalise_trace_id(trace_id)}-{secrets.token_hex(8)}-01"


def _normalise_trace_id(trace_id: str | None) -> str:
    # The coordinator may hand out UUID-style ids; W3C wants 32 hex digits, never all zeros.
    candidate = (trace_id or "").replace("-", "").lower()
    if _TRACE_ID.fullmatch(candidate) and candidate != "0" * 32:
        return candidate
    return new_trace_id()


# The most items the coordinator takes in one batch of results or heartbeats
# (app/schemas/tasks.py, MAX_BATCH_RESULTS).
MAX_BATCH = 1000
# The coordinator's largest page of a job's chunks (app/schemas/chunks.py, ChunkPageQuerySchema).
CHUNK_PAGE = 1000
# The coordinator's largest page of a job's results (app/schemas/jobs.py, MAX_RESULT_PAGE).
RESULT_PAGE = 10_000


class CoordinatorError(Exception):
    """Base of everything the client raises about a call that did not succeed."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        details: dict | None = None,
        trace_id: str | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.details = details or {}
        self.trace_id = trace_id


class CoordinatorUnavailable(CoordinatorError):
    """Connection error, timeout, 5xx or 429: try again later (after `retry_after` if set)."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs):
        super().__init__(message, **kwargs)
        self.retry_after = retry_after

    @property
    def is_blip(self) -> bool:
        """No answer, or one that says "busy, come back" (429, 502, 503, 504), not a 500."""
        return self.status is None or self.status in BLIP_STATUSES


class WaitRefused(CoordinatorError):
    """A long poll answered at once with Retry-After: the coordinator had no place to wait."""

    def __init__(self, message: str, *, retry_after: float, **kwargs):
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class StorageFailed(CoordinatorError):
    """507, or 500 storage_unavailable: retrying cannot help until an operator fixes the disk."""


class LeaseLost(CoordinatorError):
    """A task call got 409: lease_lost, stale_attempt, task_cancelled or result_conflict."""


class RequestRejected(CoordinatorError):
    """Any other 4xx: the request itself is wrong or not allowed; retrying will not help."""


def rejection_of(outcome: dict) -> CoordinatorError:
    """The exception the single endpoint would have raised for one refused item of a batch."""
    error = outcome.get("error") if isinstance(outcome.get("error"), dict) else {}
    details = error.get("details")
    kind = LeaseLost if outcome.get("status") == 409 else RequestRejected
    return kind(
        str(error.get("message") or "refused"),
        status=outcome.get("status"),
        code=error.get("code"),
        details=details if isinstance(details, dict) else {},
    )


def settings_problem(url: str, token: str) -> str | None:
    """Why a coordinator URL or bearer token cannot be used, or None when both can."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is no number
    except ValueError as exc:
        return f"{url!r} is not a URL: {exc}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{url!r} is not an http:// or https:// URL"
    if not _TOKEN.fullmatch(token):
        return "the token must be printable ASCII without spaces, as the coordinator issues them"
    return None


class ByteStream:
    """Blocks of a streamed response body; a broken connection becomes CoordinatorUnavailable."""

    def __init__(
        self, response: requests.Response, block_size: int = INPUT_BLOCK_SIZE, first_byte: int = 0
    ):
        self._response = response
        self._block_size = block_size
        # Where the input's bytes in this stream begin: a resumed read asks for a range.
        self.first_byte = first_byte

    def __iter__(self) -> Iterator[bytes]:
        try:
            for block in self._response.iter_content(self._block_size):
                if block:
                    yield block
        except _UNREACHABLE as exc:
            raise CoordinatorUnavailable(f"input stream broke: {exc}") from exc
        finally:
            self._response.close()

    def close(self) -> None:
        """Release the connection, read to the end or not."""
        self._response.close()

    def __enter__(self) -> ByteStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def settled_session(base_url: str) -> requests.Session:
    """A session for calls to base_url that reads the environment's settings for it (proxies,
    NO_PROXY, REQUESTS_CA_BUNDLE) once, not on every call.

    requests reads os.environ for each request by default: a sixth of a worker's CPU per call
    in a no-op drain (docs/performance/profile.md). Nor does it look for ~/.netrc, whose
    credentials for the coordinator's host would replace the bearer token.
    """
    session = requests.Session()
    settings = session.merge_environment_settings(base_url, {}, None, None, None)
    session.proxies.update(settings["proxies"])
    session.verify, session.cert = settings["verify"], settings["cert"]
    session.trust_env = False
    return session


class CoordinatorClient:
    """Calls the coordinator's HTTP API with a bearer token; one method per endpoint."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.base_url = base_url.rstrip("/") + "/"
        self.timeout = timeout
        self._sleep = sleep
        self.session = session or settled_session(self.base_url)
        self.session.headers["Authorization"] = f"Bearer {token}"
        self.session.headers["Accept"] = "application/json"

    def close(self) -> None:
        """Close the pooled connections."""
        self.session.close()

    # -- worker endpoints -------------------------------------------------------------------

    def claim_tasks(
        self,
        *,
        worker_id: str,
        workloads: list[str],
        capacity: int,
        wait_seconds: float = 0,
        trace_id: str | None = None,
    ) -> list[dict]:
        """Lease up to `capacity` tasks, waiting up to `wait_seconds` for one; [] if none."""
        try:
            body = self._task_request(
                "POST",
                "/api/v1/tasks/claim",
                json={
                    "worker_id": worker_id,
                    "workloads": list(workloads),
                    "capacity": capacity,
                    "wait_seconds": wait_seconds,
                },
                trace_id=trace_id,
                timeout=wait_seconds + LONG_POLL_MARGIN,
            )
        except WaitRefused as refused:
            self._wait_here(refused, wait_seconds)
            return []
        if body is None:
            return []
        tasks = body.get("tasks") if isinstance(body, dict) else None
        if not isinstance(tasks, list):
            raise _malformed("POST", "/api/v1/tasks/claim", "the answer holds no list of tasks")
        return tasks

    def stream_input(
        self,
        input_uri: str,
        *,
        worker_id: str,
        attempt: int,
        lease_token: str,
        trace_id: str | None = None,
        block_size: int = INPUT_BLOCK_SIZE,
        start: int = 0,
    ) -> ByteStream:
        """Open a task's input (from byte `start`, if the coordinator serves ranges) and return
        its bytes as a stream of blocks; the stream's first_byte says where they begin."""
        response = self._task_request(
            "GET",
            input_uri,
            params={"worker_id": worker_id, "attempt": attempt},
            # A header, not a query parameter: access logs keep URLs, and it is a secret.
            headers={
                LEASE_TOKEN_HEADER: lease_token,
                **({"Range": f"bytes={start}-"} if start else {}),
            },
            stream=True,
            trace_id=trace_id,
        )
        # A coordinator that ignores Range answers 200 with every byte from the first.
        ranged = _RANGE_START.match(response.headers.get("Content-Range", ""))
        first_byte = int(ranged[1]) if response.status_code == 206 and ranged else 0
        return ByteStream(response, block_size, first_byte)

    def renew_leases(
        self, *, worker_id: str, heartbeats: list[dict], trace_id: str | None = None
    ) -> list[dict]:
        """Renew many leases in one call; return the coordinator's outcome for each, in order.

        Each item is {task_id, attempt, lease_token} with an optional checkpoint; at most
        MAX_BATCH a call.
        """
        return self._batch("heartbeats", worker_id, heartbeats, trace_id)

    def submit_results(
        self, *, worker_id: str, results: list[dict], trace_id: str | None = None
    ) -> list[dict]:
        """Commit many results in one call; return the coordinator's outcome for each, in order."""
        return self._batch("results", worker_id, results, trace_id)

    def complete_and_claim(
        self,
        *,
        worker_id: str,
        results: list[dict],
        workloads: list[str],
        capacity: int,
        trace_id: str | None = None,
    ) -> tuple[list[dict], list[dict]]:
        """Commit many results, then lease up to `capacity` tasks without waiting, in one call;
        return each result's outcome, in order, and the tasks leased ([] if none)."""
        claim = {"workloads": list(workloads)}
        body = self._batch_call("results", worker_id, results, trace_id, claim, capacity)
        tasks = body.get("tasks")
        # The results are answered either way; a claim refused (claim_error) leased nothing.
        return body["results"], tasks if isinstance(tasks, list) else []

    def _batch(
        self, name: str, worker_id: str, items: list[dict], trace_id: str | None
    ) -> list[dict]:
        return self._batch_call(name, worker_id, items, trace_id)["results"]

    def _batch_call(
        self,
        name: str,
        worker_id: str,
        items: list[dict],
        trace_id: str | None,
        extra: dict | None = None,
        claim: int | None = None,
    ) -> dict:
        # POST /api/v1/tasks/{name} with the items under {name}; each answered in order.
        path = f"/api/v1/tasks/{name}"
        body = self._task_request(
            "POST",
            path,
            json={"worker_id": worker_id, name: items, **(extra or {})},
            params=None if claim is None else {"claim": str(claim)},
            trace_id=trace_id,
        )
        outcomes = body.get("results") if isinstance(body, dict) else None
        if not isinstance(outcomes, list) or len(outcomes) != len(items):
            raise _malformed(
                "POST", path, f"the answer lacks one outcome for each of the {len(items)} items"
            )
        if not all(
            isinstance(o, dict) and o.get("outcome") in BATCH_OUTCOMES[name] for o in outcomes
        ):
            raise _malformed("POST", path, "the answer holds an outcome the API does not name")
        return body

    def submit_result(
        self,
        task_id: str,
        *,
        worker_id: str,
        attempt: int,
        lease_token: str,
        result: dict,
        trace_id: str | None = None,
    ) -> dict:
        """Commit a result (summary + metrics, or a result manifest); safe to repeat."""
        payload = {**result, "worker_id": worker_id, "attempt": attempt, "lease_token": lease_token}
        return self._task_request(
            "POST", f"/api/v1/tasks/{task_id}/result", json=payload, trace_id=trace_id
        )

    def report_failure(
        self,
        task_id: str,
        *,
        worker_id: str,
        attempt: int,
        lease_token: str,
        error_code: str,
        error_message: str,
        retryable: bool,
        details: dict | None = None,
        retry_after_seconds: float | None = None,
        trace_id: str | None = None,
    ) -> dict:
        """Tell the coordinator this attempt failed, whether another attempt may succeed and,
        if the worker knows, how long it should wait."""
        payload = {
            "worker_id": worker_id,
            "attempt": attempt,
            "lease_token": lease_token,
            "error_code": error_code,
            "error_message": error_message,
            "retryable": retryable,
            "details": details or {},
        }
        if retry_after_seconds is not None:
            payload["retry_after_seconds"] = retry_after_seconds
        return self._task_request(
            "POST", f"/api/v1/tasks/{task_id}/failure", json=payload, trace_id=trace_id
        )

    # -- job endpoints (users and operators) ------------------------------------------------

    def submit_csv_job(
        self,
        file: BinaryIO,
        *,
        column: str,
        delimiter: str = ",",
        chunks: int = 1,
        priority: int = 0,
        labels: dict[str, str] | None = None,
        not_before: str | None = None,
        idempotency_key: str | None = None,
        filename: str | None = None,
        trace_id: str | None = None,
        form: bool = False,
    ) -> dict:
        """Upload a CSV from an open binary file as a csv_stats job; return the job.

        The file is the whole text/csv body and the parameters go in the query string;
        form=True sends a multipart form instead, as a browser or curl -F would, and so does
        a query too long for the coordinator's request line (long labels or column names).
        """
        fields = [
            ("column", column),
            ("delimiter", delimiter),
            ("chunks", str(chunks)),
            ("priority", str(priority)),
        ]
        fields += [("label", f"{key}={value}") for key, value in (labels or {}).items()]
        if not_before is not None:
            fields.append(("not_before", not_before))
        params = None
        if form or len(urlencode(fields)) > QUERY_BUDGET:
            name = filename or os.path.basename(getattr(file, "name", "") or "upload.csv")
            body = MultipartUpload(fields, "file", file, name)
            headers = {"Content-Type": body.content_type}
        else:
            body, params = FileBody(file), fields
            headers = {"Content-Type": "text/csv"}
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        return self._request(
            "POST",
            "/api/v1/jobs",
            data=body,
            params=params,
            headers=headers,
            trace_id=trace_id,
            timeout=UPLOAD_TIMEOUT,
            submits=True,
        )

    def submit_job(self, job: dict, *, idempotency_key: str, trace_id: str | None = None) -> dict:
        """Submit a manifest job (as POST /api/v1/jobs takes its JSON); return the job."""
        return self._request(
            "POST",
            "/api/v1/jobs",
            json=job,
            headers={"Idempotency-Key": idempotency_key},
            trace_id=trace_id,
            submits=True,
        )

    def get_job(self, job_id: str, *, trace_id: str | None = None) -> dict:
        """A job's aggregate status, progress, and result or error."""
        return self._request("GET", f"/api/v1/jobs/{_segment(job_id)}", trace_id=trace_id)

    def watch_job(
        self,
        job_id: str,
        version: str | None,
        *,
        wait_seconds: float,
        until_finished: bool = False,
        trace_id: str | None = None,
    ) -> tuple[dict | None, str | None]:
        """Wait up to wait_seconds for the job to change (until_finished: to finish, however it
        changes on the way): (job, ETag), else (None, version)."""
        path = f"/api/v1/jobs/{_segment(job_id)}"
        headers = {"If-None-Match": version} if version else None
        params = {"wait_seconds": wait_seconds, **({"until": "finished"} if until_finished else {})}
        with self._request(
            "GET",
            path,
            params=params,
            headers=headers,
            stream=True,
            trace_id=trace_id,
            timeout=wait_seconds + LONG_POLL_MARGIN,
        ) as response:
            answer = (
                (None, version)
                if response.status_code == 304
                else (_json_body("GET", path, response), response.headers.get("ETag"))
            )
            refused = _retry_after(response.headers.get("Retry-After"))
        if refused is not None:  # the coordinator had no place to wait: the job as it was
            self._wait_here(WaitRefused(path, retry_after=refused), wait_seconds)
        return answer

    def _wait_here(self, refused: WaitRefused, wait_seconds: float) -> None:
        # The coordinator had no place for the long poll to wait: wait here instead, as long as
        # it asks and no longer than the poll would have, so the next poll does not come at once.
        self._sleep(min(refused.retry_after, wait_seconds))

    def list_jobs(
        self,
        *,
        status: str | None = None,
        limit: int | None = None,
        label: str | None = None,
        owner: str | None = None,
        workload: str | None = None,
        depends_on: str | None = None,
        cursor: str | None = None,
        trace_id: str | None = None,
    ) -> dict:
        """One page of the caller's jobs, newest first: {jobs, next_cursor}."""
        params = {
            "status": status,
            "limit": limit,
            "label": label,
            "owner": owner,
            "workload": workload,
            "depends_on": depends_on,
            "cursor": cursor,
        }
        return self._request(
            "GET",
            "/api/v1/jobs",
            trace_id=trace_id,
            params={k: v for k, v in params.items() if v is not None},
        )

    def list_results(self, job_id: str, *, trace_id: str | None = None) -> dict:
        """A job's completed result manifests in chunk order, a page at a time: {results}."""
        results: list[dict] = []
        after = None
        while True:
            page = self.result_page(job_id, after=after, limit=RESULT_PAGE, trace_id=trace_id)
            results += page["results"]
            # The coordinator sets next_after to null on the last page, and only there.
            after = page["next_after"]
            if after is None:
                return {"results": results}

    def result_page(
        self,
        job_id: str,
        *,
        after: int | None = None,
        limit: int = CHUNK_PAGE,
        trace_id: str | None = None,
    ) -> dict:
        """Up to `limit` of a job's results past chunk index `after`: {results, next_after}."""
        # In chunk order; next_after is null on the last page, and only there.
        params = {"limit": limit, **({"after": after} if after is not None else {})}
        path = f"/api/v1/jobs/{_segment(job_id)}/results"
        return self._request("GET", path, params=params, trace_id=trace_id)

    def list_chunks(self, job_id: str, *, trace_id: str | None = None) -> dict:
        """Every chunk of a job with its attempts, a page at a time: {chunks}."""
        chunks: list[dict] = []
        after = -1
        while True:
            page = self.chunk_page(job_id, after=after, limit=CHUNK_PAGE, trace_id=trace_id)
            chunks += page["chunks"]
            # A chunk page always carries next_after (where it ended): a short page is the last.
            if len(page["chunks"]) < CHUNK_PAGE:
                return {"chunks": chunks}
            after = page["next_after"]

    def chunk_page(
        self,
        job_id: str,
        *,
        after: int = -1,
        limit: int = CHUNK_PAGE,
        trace_id: str | None = None,
    ) -> dict:
        """Up to `limit` chunks of a job in order, from the first past index `after`:
        {chunks, next_after}."""
        return self._request(
            "GET",
            f"/api/v1/jobs/{_segment(job_id)}/chunks",
            params={"after": after, "limit": limit},
            trace_id=trace_id,
        )

    def get_chunk(self, job_id: str, chunk_id: str, *, trace_id: str | None = None) -> dict:
        """One chunk with each attempt's worker, outcome and trace id."""
        return self._request(
            "GET", f"/api/v1/jobs/{_segment(job_id)}/chunks/{_segment(chunk_id)}", trace_id=trace_id
        )

    def cancel_job(self, job_id: str, *, trace_id: str | None = None) -> dict:
        """Cancel a job (repeating it is harmless); return the job."""
        return self._request("POST", f"/api/v1/jobs/{_segment(job_id)}/cancel", trace_id=trace_id)

    def cancel_jobs(
        self,
        *,
        workload: str | None = None,
        label: str | None = None,
        owner: str | None = None,
        depends_on: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        trace_id: str | None = None,
    ) -> dict:
        """Cancel up to `limit` of the caller's unfinished jobs that match, queued ones first:
        {cancelled, count, more}."""
        given = {
            "workload": workload,
            "label": label,
            "owner": owner,
            "depends_on": depends_on,
            "status": status,
            "limit": limit,
        }
        body = {name: value for name, value in given.items() if value is not None}
        return self._request("POST", "/api/v1/jobs/cancel", json=body, trace_id=trace_id)

    def retry_job(self, job_id: str, *, trace_id: str | None = None) -> dict:
        """Re-queue a recoverable failed job's unfinished chunks; return the job."""
        return self._request("POST", f"/api/v1/jobs/{_segment(job_id)}/retry", trace_id=trace_id)

    def list_events(
        self,
        *,
        after: int = 0,
        limit: int | None = None,
        job_id: str | None = None,
        types: list[str] | None = None,
        trace_id: str | None = None,
    ) -> dict:
        """Outbox events after an id, oldest first (one job's, of some types, if named):
        {events, next_after}."""
        given = {"after": after, "limit": limit, "job_id": job_id, "type": types or None}
        params = {name: value for name, value in given.items() if value is not None}
        return self._request("GET", "/api/v1/events", params=params, trace_id=trace_id)

    def put_schedule(
        self,
        name: str,
        *,
        cron: str,
        job: dict,
        paused: bool,
        timezone: str = "UTC",
        trace_id: str | None = None,
    ) -> dict:
        """Create or replace the caller's schedule of this name; return it."""
        body = {"cron": cron, "timezone": timezone, "job": job, "paused": paused}
        return self._request(
            "PUT", f"/api/v1/schedules/{_segment(name)}", json=body, trace_id=trace_id
        )

    def run_schedule(
        self,
        name: str,
        *,
        idempotency_key: str,
        owner: str | None = None,
        trace_id: str | None = None,
    ) -> dict:
        """Submit the caller's schedule's job now (an operator: the owner's); return the job."""
        return self._request(
            "POST",
            f"/api/v1/schedules/{_segment(name)}/run",
            params=_whose(owner),
            headers={"Idempotency-Key": idempotency_key},
            trace_id=trace_id,
        )

    def pause_schedule(
        self, name: str, *, paused: bool, owner: str | None = None, trace_id: str | None = None
    ) -> dict:
        """Pause the caller's schedule (an operator: the owner's), or resume it from now;
        return it."""
        action = "pause" if paused else "resume"
        return self._request(
            "POST",
            f"/api/v1/schedules/{_segment(name)}/{action}",
            params=_whose(owner),
            trace_id=trace_id,
        )

    def list_schedules(self, *, trace_id: str | None = None) -> dict:
        """The caller's schedules by name: {schedules}."""
        return self._request("GET", "/api/v1/schedules", trace_id=trace_id)

    def delete_schedule(
        self, name: str, *, owner: str | None = None, trace_id: str | None = None
    ) -> None:
        """Delete the caller's schedule of this name (an operator: the owner's)."""
        self._request(
            "DELETE",
            f"/api/v1/schedules/{_segment(name)}",
            params=_whose(owner),
            trace_id=trace_id,
        )

    # -- operator endpoints -----------------------------------------------------------------

    def queue_status(self, *, trace_id: str | None = None) -> dict:
        """Chunks by state and workload, oldest pending age, active leases against the caps."""
        return self._request("GET", "/api/v1/queue", trace_id=trace_id)

    def list_workers(self, *, trace_id: str | None = None) -> dict:
        """Each worker's last heartbeat, leases held, chunks done and peak memory: {workers}."""
        return self._request("GET", "/api/v1/workers", trace_id=trace_id)

    def list_workloads(self, *, trace_id: str | None = None) -> dict:
        """Every workload the coordinator serves, with its caps and pause: {workloads}."""
        return self._request("GET", "/api/v1/workloads", trace_id=trace_id)

    def pause_workload(self, workload: str, *, paused: bool, trace_id: str | None = None) -> dict:
        """Pause a workload (claims lease none of its tasks), or resume it; return it."""
        action = "pause" if paused else "resume"
        return self._request(
            "POST", f"/api/v1/workloads/{_segment(workload)}/{action}", trace_id=trace_id
        )

    def get_workload(self, workload: str, *, trace_id: str | None = None) -> dict:
        """One served workload with its caps and pause."""
        return self._request("GET", f"/api/v1/workloads/{_segment(workload)}", trace_id=trace_id)

    def add_workload(self, name: str, caps: dict, *, trace_id: str | None = None) -> dict:
        """Serve a new workload: the caps given, the coordinator's settings for the rest."""
        return self._request(
            "POST", "/api/v1/workloads", json={"name": name, **caps}, trace_id=trace_id
        )

    def change_workload(self, workload: str, caps: dict, *, trace_id: str | None = None) -> dict:
        """Change some of a served workload's caps (None lifts one); return the workload."""
        return self._request(
            "PATCH", f"/api/v1/workloads/{_segment(workload)}", json=caps, trace_id=trace_id
        )

    def remove_workload(self, workload: str, *, trace_id: str | None = None) -> None:
        """Stop serving a workload (refused while it has unfinished jobs)."""
        self._request("DELETE", f"/api/v1/workloads/{_segment(workload)}", trace_id=trace_id)

    # -- plumbing ---------------------------------------------------------------------------

    def _task_request(self, method: str, path: str, **kwargs):
        # On task calls every 409 means "this attempt no longer owns the task".
        try:
            return self._request(method, path, **kwargs)
        except RequestRejected as exc:
            if exc.status != 409:
                raise
            raise LeaseLost(
                exc.message, status=409, code=exc.code, details=exc.details, trace_id=exc.trace_id
            ) from exc

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: dict | None = None,
        params: dict | list[tuple[str, str]] | None = None,
        stream: bool = False,
        trace_id: str | None = None,
        timeout: float | None = None,
        data: MultipartUpload | FileBody | None = None,
        headers: dict[str, str] | None = None,
        submits: bool = False,
    ):
        """Send one call; return the JSON body (None for 204), or the response when streaming;
        submits=True: the body as a SubmittedJob."""
        url = self._url(path)
        try:
            response = self.session.request(
                method,
                url,
                json=json,
                data=data,
                params=params,
                stream=stream,
                timeout=timeout if timeout is not None else self.timeout,
                headers={**(headers or {}), "traceparent": traceparent(trace_id)},
            )
        except _UNREACHABLE as exc:
            raise CoordinatorUnavailable(f"{method} {path}: {exc}") from exc

        if response.status_code >= 400 or response.status_code == 204:
            try:
                _raise_for_status(method, path, response)
            finally:
                response.close()
            return None
        if stream:
            return response
        body = _json_body(method, path, response)
        return SubmittedJob(body, created=response.status_code == 201) if submits else body

    def _url(self, path: str) -> str:
        url = urljoin(self.base_url, path.lstrip("/")) if not _is_absolute(path) else path
        # The bearer token must never travel to a host the operator did not name.
        if _origin(url) != _origin(self.base_url):
            raise ValueError(f"refusing to call {url}: not on the coordinator {self.base_url}")
        return url


def _whose(owner: str | None) -> dict | None:
    """The query naming a schedule's owner, when it is not the caller."""
    return {"owner": owner} if owner is not None else None


def _segment(value: str) -> str:
    # An id typed by a person must stay one path segment ("../queue" is not a job id).
    return quote(str(value), safe="")


def _is_absolute(path: str) -> bool:
    return bool(urlsplit(path).scheme)


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc


class SubmittedJob(dict):
    """A job as POST /api/v1/jobs answered it, and whether this call created it.

    A dict, as every other answer is (callers index and print it alike); `created` is False
    when the coordinator returned an earlier job under the same Idempotency-Key (200, not 201).
    """

    def __init__(self, job: dict, *, created: bool):
        super().__init__(job)
        self.created = created


def _json_body(method: str, path: str, response: requests.Response) -> dict:
    try:
        body = response.json()
    except ValueError as exc:
        raise _malformed(
            method, path, f"{response.status_code} with a body that is not JSON"
        ) from exc
    if not isinstance(body, dict):  # every answer of the API is an object
        raise _malformed(method, path, f"{response.status_code} with a body that is no object")
    return body


def _malformed(method: str, path: str, what: str) -> CoordinatorUnavailable:
    # Not the API's answer (a proxy's page, a cut body): a blip to retry, as no answer is.
    # Retrying is safe: every call the worker repeats is idempotent or fenced.
    return CoordinatorUnavailable(f"{method} {path}: {what}")


def _raise_for_status(method: str, path: str, response: requests.Response) -> None:
    status = response.status_code
    if status == 204:
        # Only a long poll refused a place to wait says when to come back on a 204.
        refused = _retry_after(response.headers.get("Retry-After"))
        if refused is not None:
            raise WaitRefused(f"{method} {path}: no place to wait", retry_after=refused, status=204)
        return
    error, trace_id = _error_body(response)
    code = error.get("code")
    message = error.get("message") or f"{method} {path}: HTTP {status}"
    details = error.get("details") if isinstance(error.get("details"), dict) else {}
    fields = {"status": status, "code": code, "details": details, "trace_id": trace_id}
    # A 503 is a blip whatever its code: the object store or this coordinator's copy of an
    # input (storage_unavailable, input_not_here) may be back, or another host may have it.
    if status == 507 or (status == 500 and code in STORAGE_FAILURE_CODES):
        raise StorageFailed(message, **fields)
    if status == 429 or status >= 500:
        raise CoordinatorUnavailable(
            message, retry_after=_retry_after(response.headers.get("Retry-After")), **fields
        )
    raise RequestRejected(message, **fields)


def _error_body(response: requests.Response) -> tuple[dict, str | None]:
    try:
        body = response.json()
    except ValueError:
        return {}, None
    if not isinstance(body, dict):
        return {}, None
    error = body.get("error")
    return (error if isinstance(error, dict) else {}), body.get("trace_id")


def _retry_after(value: str | None) -> float | None:
    """Parse Retry-After: delay-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
