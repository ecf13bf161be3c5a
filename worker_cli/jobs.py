"""The SDK's Client: submit a job of task arguments, wait for it to finish, read its results."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime
from functools import partial

from worker_cli.client import DEFAULT_TIMEOUT, CoordinatorClient, CoordinatorUnavailable
from worker_cli.schedule import Backoff
from worker_cli.settings import USER_TOKEN_VARIABLE, coordinator_settings

FINISHED = frozenset({"succeeded", "failed", "cancelled"})
# The longest a job watch may wait on the coordinator (app/schemas/jobs.py, JobWaitQuerySchema).
WATCH_SECONDS = 30.0
# Tries of one call while the coordinator is unavailable: a restart, not an outage.
TRIES = 5


class JobFailed(Exception):
    """The job failed or was cancelled: `job` is its last state, `error` its {code, message}."""

    def __init__(self, job: dict):
        self.job = job
        self.status = job.get("status")
        self.error = job.get("error") or {}
        cause = f"{self.error.get('code')}: {self.error.get('message')}" if self.error else ""
        super().__init__(f"job {job.get('id')} {self.status}" + (f": {cause}" if cause else ""))


class WaitTimedOut(TimeoutError):
    """The job had not finished when the wait's timeout ran out: `job` is its last state."""

    def __init__(self, job: dict, timeout: float):
        super().__init__(f"job {job.get('id')} still {job.get('status')} after {timeout:g}s")
        self.job = job


class Client:
    """Submits jobs of task arguments and reads their results, as the job's owner."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        api: CoordinatorClient | None = None,
    ):
        if api is None:
            url, token = coordinator_settings(url, token, USER_TOKEN_VARIABLE)
            api = CoordinatorClient(url, token, timeout=timeout, sleep=sleep)
        # Every endpoint of the API, for what the SDK's few methods do not cover.
        self.api = api
        self._clock = clock
        self._sleep = sleep

    def close(self) -> None:
        """Close the pooled connections."""
        self.api.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def submit(
        self,
        workload: str,
        args_list: Iterable[object],
        *,
        labels: dict[str, str] | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        not_before: datetime | str | None = None,
        timeout_seconds: int | None = None,
        depends_on: Iterable[str] | None = None,
        idempotency_key: str | None = None,
    ) -> dict:
        """Submit one task per item of `args_list` (each a JSON object or array); return the job."""
        # Without an idempotency_key each call submits a new job; with one, the job that key
        # first submitted comes back instead.
        job = {"workload": workload, "tasks": [{"args": args} for args in args_list]}
        if isinstance(not_before, datetime):
            not_before = not_before.isoformat()
        options = {
            "labels": labels,
            "priority": priority,
            "max_attempts": max_attempts,
            "not_before": not_before,
            "timeout_seconds": timeout_seconds,
            "depends_on": None if depends_on is None else [str(job_id) for job_id in depends_on],
        }
        job.update({name: value for name, value in options.items() if value is not None})
        # One key for every try, so a submission the coordinator took before a blip is not
        # taken twice.
        key = idempotency_key or str(uuid.uuid4())
        return self._retrying(lambda: self.api.submit_job(job, idempotency_key=key))

    def job(self, job_id: str) -> dict:
        """The job's status, progress, and error if it failed."""
        return self._retrying(lambda: self.api.get_job(job_id))

    def wait(self, job_id: str, timeout: float | None = None) -> dict:
        """Return the job once it succeeds; raise JobFailed, or WaitTimedOut after `timeout`."""
        # JobFailed: the job failed or was cancelled. WaitTimedOut: `timeout` seconds passed
        # with the job unfinished (None: follow it for as long as it takes).
        deadline = None if timeout is None else self._clock() + timeout
        job, version = self._retrying(lambda: self.api.watch_job(job_id, None, wait_seconds=0))
        while job["status"] not in FINISHED:
            left = WATCH_SECONDS if deadline is None else deadline - self._clock()
            if left <= 0:
                raise WaitTimedOut(job, timeout)
            # The coordinator answers as soon as the job finishes, or after the wait.
            seconds = min(WATCH_SECONDS, left)
            watch = partial(
                self.api.watch_job, job_id, version, wait_seconds=seconds, until_finished=True
            )
            changed, version = self._retrying(watch)
            job = changed or job
        if job["status"] != "succeeded":
            raise JobFailed(job)
        return job

    def results(self, job_id: str) -> list:
        """The values the job's tasks stored, in chunk order (a task that stored none: left out)."""
        # A task whose result is stored elsewhere comes without `value` (ResultManifestSchema).
        manifests = self._retrying(lambda: self.api.list_results(job_id))["results"]
        return [item["value"] for item in manifests if "value" in item]

    def _retrying(self, call: Callable[[], object]):
        # Every call here is a read, or a submission under one idempotency key: safe to repeat.
        backoff = Backoff(0.25, 5.0)
        for _ in range(TRIES - 1):
            try:
                return call()
            except CoordinatorUnavailable as exc:
                self._sleep(backoff.next_delay(exc.retry_after))
        return call()
