"""A stack per scenario on its own scratch database, and the bookkeeping of each round."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import psycopg
import requests
from psycopg.rows import dict_row

from bench.queue import scratch_database
from bench.reliability import invariants
from devstack.observe import FAST, SHORT_POLL, Jobs, events, totals_of
from devstack.stack import LocalStack

# The worker stops within 2 s of a SIGTERM, so a round never waits on a warm stop.
WORKER_ARGS = (*SHORT_POLL, "--grace-seconds", "2")


@dataclass
class Rig:
    """One scenario's running stack, its database, and its rounds."""

    stack: LocalStack
    database_url: str
    db: psycopg.Connection
    deadline: float
    rounds: list[dict] = field(default_factory=list)
    unavailable_seen: int = 0  # 503s wait_job met and waited out
    terminated: int | None = None  # backends the last termination ended

    @property
    def jobs(self) -> Jobs:
        """The e2e suite's user-side helper over this stack."""
        return Jobs(self.stack, self.db)

    def reconnect(self, timeout: float = 30) -> None:
        """Replace the bench's connection, after a fault that may have ended it."""
        self.db.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.db = connect(self.database_url)
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def wait_job(self, job_id: str, timeout: float) -> dict:
        """Jobs.wait for any final status, starting over after a 503 (counted, not hidden)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.jobs.wait(job_id, timeout=max(1.0, deadline - time.monotonic()))
            except AssertionError as exc:
                if '"unavailable"' not in str(exc) or time.monotonic() > deadline:
                    raise
                self.unavailable_seen += 1
                time.sleep(0.1)

    def wait_booted(self, timeout: float = 30) -> None:
        """Wait until every gunicorn worker process is past its start checks.

        /readyz answers from the first process up; a second one still booting would meet a
        storage fault made now in its start checks, and a failed boot ends the whole server.
        A process starts its NOTIFY listener last, so each booted one has a backend whose
        latest statement is a LISTEN (seen the same over TCP and over a Unix socket, where
        the client end of a connection has no address to look at).
        """
        [master] = [
            p
            for name, p in self.stack.processes.items()
            if name.startswith("coordinator") and p.poll() is None
        ]
        expected = int(self.stack.base_env().get("CHUNKWISE_WEB_WORKERS", "2"))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            listening = self.db.execute(
                "SELECT count(*) AS n FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE 'LISTEN %'"
            ).fetchone()["n"]
            if len(psutil.Process(master.pid).children()) == expected == listening:
                return
            time.sleep(0.05)
        raise TimeoutError(f"the coordinator's {expected} processes were not up in {timeout} s")

    def worker(self, name: str, *args: str, coordinator: str | None = None):
        """Start a chunkwise-worker (optionally through a relay) and return its process."""
        extra = ("--coordinator", coordinator) if coordinator else ()
        return self.stack.start_worker(name, *WORKER_ARGS, *args, *extra)

    def stop_workers(self) -> None:
        """SIGTERM every worker still running, SIGKILL after 10 s; SIGCONT a stopped one first."""
        for name, process in self.stack.processes.items():
            if name.startswith("coordinator") or process.poll() is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGCONT)
            try:
                self.stack.kill(name, signal.SIGTERM)
            except Exception:  # noqa: BLE001 - a stuck worker is killed rather than waited on
                self.stack.kill(name, signal.SIGKILL)

    def events(self, name: str, *names: str) -> list[dict]:
        """One process's log lines with one of these events."""
        return events(self.stack, name, *names)

    def run_round(self, action: Callable[[int], dict], **labels) -> dict | None:
        """Run one round, then check the invariants; None once the time budget is spent."""
        number = len(self.rounds) + 1
        if time.monotonic() > self.deadline:
            return None
        record: dict = {"round": number, **labels}
        try:
            record.update(action(number))
        except Exception as exc:  # noqa: BLE001 - a failed round is a figure, not a crash
            record["error"] = f"{type(exc).__name__}: {exc}"
            record["traceback"] = traceback.format_exc(limit=4)
        finally:
            self.stop_workers()
        try:
            record["violations"] = invariants.check(self.database_url)
        except psycopg.Error as exc:
            record["error"] = record.get("error") or f"invariants not checked: {exc}"
        self.rounds.append(record)
        print(f"  round {number}: {_brief(record)}", flush=True)
        return record

    def wait_task(self, predicate_sql: str, params: tuple, timeout: float, what: str) -> dict:
        """Poll (every 10 ms) until the query returns a row; return it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row = self.db.execute(predicate_sql, params).fetchone()
            if row:
                return row
            time.sleep(0.01)
        raise TimeoutError(f"no {what} within {timeout} s")

    def lease_of(self, worker: str, timeout: float = 20) -> dict:
        """The task the worker holds, once it holds one."""
        return self.wait_task(
            "SELECT id, job_id, chunk_index, attempt, heartbeat_at FROM tasks "
            "WHERE lease_owner = %s AND status = 'leased'",
            (worker,),
            timeout,
            f"lease held by {worker}",
        )

    def exact(self, job: dict, data: bytes) -> bool:
        """The job succeeded with the sequential count's result."""
        return job["status"] == "succeeded" and job["result"] == totals_of(data)

    def outbox(self, job_id: str) -> list[str]:
        """The job's outbox events, in order."""
        rows = self.db.execute("SELECT event FROM outbox WHERE job_id = %s ORDER BY id", (job_id,))
        return [r["event"] for r in rows.fetchall()]


def connect(url: str) -> psycopg.Connection:
    """The bench's own autocommit connection, named so that faults can spare it."""
    return psycopg.connect(
        url,
        autocommit=True,
        row_factory=dict_row,
        application_name=invariants.APPLICATION_NAME,
        connect_timeout=10,
    )


def _brief(record: dict) -> str:
    shown = {k: v for k, v in record.items() if k not in ("traceback",)}
    text = str(shown)
    return text if len(text) < 300 else text[:297] + "..."


class Bench:
    """Where the run's scenarios get their databases, directories and time budget."""

    def __init__(self, server_url: str, run_dir: Path, rounds: int, seconds: float):
        self.server_url = server_url
        self.run_dir = run_dir
        self.rounds = rounds
        self.deadline = time.monotonic() + seconds

    @contextlib.contextmanager
    def rig(
        self, name: str, env: dict | None = None, server_url: str | None = None
    ) -> Iterator[Rig]:
        """A migrated scratch database with a coordinator on it, all gone afterwards."""
        with scratch_database(server_url or self.server_url) as url:
            stack = LocalStack(
                database_url=url,
                run_dir=self.run_dir / name,
                env={**FAST, "CHUNKWISE_LOG_LEVEL": "INFO", **(env or {})},
            )
            try:
                stack.prepare()
                stack.start_coordinator()
                rig = Rig(stack, url, connect(url), self.deadline)
                try:
                    yield rig
                finally:
                    rig.db.close()
            finally:
                stack.stop()


class Prober:
    """Asks the coordinator every 50 ms for /readyz and a job, recording what came back."""

    def __init__(self, stack: LocalStack, job_id: str):
        self.url = stack.url
        self.job_url = f"{stack.url}/api/v1/jobs/{job_id}"
        self.session = stack.api()
        self.samples: list[tuple[float, str, str]] = []  # (time, what, status or error)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._probe, daemon=True)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _probe(self) -> None:
        while not self._stop.is_set():
            for what, url in (("readyz", f"{self.url}/readyz"), ("job", self.job_url)):
                try:
                    answer = str(self.session.get(url, timeout=2).status_code)
                except requests.RequestException as exc:
                    answer = type(exc).__name__
                self.samples.append((time.monotonic(), what, answer))
            self._stop.wait(0.05)

    def health(self) -> list[tuple[float, bool]]:
        """(time, both answers 200) per probe pair."""
        pairs = []
        for (t, _, first), (_, _, second) in zip(
            self.samples[::2], self.samples[1::2], strict=False
        ):
            pairs.append((t, first == "200" and second == "200"))
        return pairs

    def answers_since(self, since: float) -> list[str]:
        """Every answer recorded from `since` on, as `what:status`."""
        return [f"{what}:{answer}" for t, what, answer in self.samples if t >= since]
