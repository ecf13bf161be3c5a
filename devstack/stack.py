"""The local stack as real processes: PostgreSQL, migrations, gunicorn, workers.

devstack/demo.py (make demo, make run), the benchmarks in bench/ and the e2e tests all drive
this one LocalStack class.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import requests

from app import migrations
from worker_cli.client import CoordinatorClient, settled_session
from worker_cli.jobs import FINISHED

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


# make run's address unless CHUNKWISE_BIND names another: the port the docs and examples use.
RUN_BIND = "127.0.0.1:8000"
# How often a followed job's progress is shown while it runs; its end is shown at once.
PROGRESS_SECONDS = 0.25


def free_port() -> int:
    """A TCP port on loopback nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StackStopped(Exception):
    """The coordinator, or every worker, of a LocalStack exited while a job was followed."""


class BindRefused(Exception):
    """make run cannot listen where it was asked to; the message says why and what to do."""


def run_address(bind: str | None) -> tuple[str, int]:
    """make run's (host, port): CHUNKWISE_BIND's HOST:PORT, else RUN_BIND, checked free now."""
    text = bind or RUN_BIND
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BindRefused(f"CHUNKWISE_BIND={text!r} is not HOST:PORT, e.g. {RUN_BIND}")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        # As gunicorn binds: a port a stopped run left in TIME_WAIT is free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, int(port)))
        except OSError as exc:
            taken = exc.errno == errno.EADDRINUSE
            why = "is taken (another make run?)" if taken else f"cannot be bound ({exc.strerror})"
            raise BindRefused(
                f"{host}:{port} {why}: pick another address with "
                f"CHUNKWISE_BIND, e.g. CHUNKWISE_BIND={host}:{int(port) + 1} make run"
            ) from None
    return host, int(port)


def connect_host(host: str) -> str:
    """Where to reach a server bound to host: loopback for a wildcard, which is no address."""
    try:
        wildcard = ipaddress.ip_address(host).is_unspecified
    except ValueError:  # a name, such as localhost
        return host
    return ("::1" if ":" in host else "127.0.0.1") if wildcard else host


@dataclass
class Tokens:
    """The seeded local credentials, and the token /metrics is scraped with."""

    user: str = field(default_factory=lambda: "cwu_" + secrets.token_urlsafe(32))
    operator: str = field(default_factory=lambda: "cwu_" + secrets.token_urlsafe(32))
    worker: str = field(default_factory=lambda: "cww_" + secrets.token_urlsafe(32))
    metrics: str = field(default_factory=lambda: secrets.token_urlsafe(32))


def kept_tokens(secrets_dir: Path) -> Tokens:
    """The tokens a previous run stored in secrets_dir, else new ones, stored there (0600 in 0700).

    make run seeds the same credentials each time: minting new ones per start would leave
    every earlier start's tokens registered and valid.
    """
    secrets_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    # mkdir's mode applies only to a directory it creates; one left by an older run is narrowed.
    secrets_dir.chmod(0o700)
    path = secrets_dir / "tokens.json"
    known = {}
    if path.exists():
        known = json.loads(path.read_text())
    tokens = Tokens(**{k: v for k, v in known.items() if k in Tokens.__dataclass_fields__})
    if known != vars(tokens):
        # os.open's mode: the file never exists, even for a moment, readable by others.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(vars(tokens), f)
    path.chmod(0o600)
    return tokens


# Never in a worker's environment: it needs its own credential and the coordinator's URL,
# not the database, nor the people's tokens, nor the scrape token.
WORKER_WITHHELD = (
    "DATABASE_URL",
    "TEST_DATABASE_URL",
    "CHUNKWISE_SEED_USER_TOKEN",
    "CHUNKWISE_SEED_OPERATOR_TOKEN",
    "CHUNKWISE_SEED_WORKER_TOKEN",
    "CHUNKWISE_TOKEN",
    "CHUNKWISE_METRICS_TOKEN",
    "CHUNKWISE_SECRET_KEY",
)


@dataclass
class LocalStack:
    """Coordinator and workers as subprocesses over one database; logs under run_dir/logs."""

    database_url: str
    run_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    tokens: Tokens = field(default_factory=Tokens)
    port: int = field(default_factory=free_port)
    host: str = "127.0.0.1"
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    coordinators: set[str] = field(default_factory=set)  # which processes serve; the rest work

    @property
    def url(self) -> str:
        """The coordinator's base URL."""
        host = connect_host(self.host)
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    @property
    def logs(self) -> Path:
        """Where each process writes its JSON log lines."""
        return self.run_dir / "logs"

    def base_env(self) -> dict[str, str]:
        """The environment every process of the stack shares."""
        return {
            **os.environ,
            "DATABASE_URL": self.database_url,
            "CHUNKWISE_TEMP_DIR": str(self.run_dir / "tmp"),
            "CHUNKWISE_ARCHIVE_DIR": str(self.run_dir / "archive"),
            "CHUNKWISE_BIND": f"[{self.host}]:{self.port}"
            if ":" in self.host
            else f"{self.host}:{self.port}",
            "CHUNKWISE_URL": self.url,
            "CHUNKWISE_SEED_USER_TOKEN": self.tokens.user,
            "CHUNKWISE_SEED_OPERATOR_TOKEN": self.tokens.operator,
            "CHUNKWISE_SEED_WORKER_TOKEN": self.tokens.worker,
            "CHUNKWISE_WORKER_TOKEN": self.tokens.worker,
            "CHUNKWISE_METRICS_TOKEN": self.tokens.metrics,
            "PROMETHEUS_MULTIPROC_DIR": str(self.run_dir / "prometheus"),
            **self.env,
        }

    def worker_env(self) -> dict[str, str]:
        """A worker's environment: the stack's, less the database and every other credential."""
        return {
            name: value
            for name, value in self.base_env().items()
            if name not in WORKER_WITHHELD and not name.startswith("PG")
        }

    def prepare(self) -> None:
        """Apply migrations and seed the tokens (the compose migrate and seed services)."""
        # The stack's own directory (data, logs, archive, keys): nobody else may list it, even
        # when an older run left it readable. Others may pass through it (0711): under root
        # the embedded server runs as its own user, with its data in run_dir/pg. Everything
        # in it is private on its own (0700 directories, 0600 files).
        self.run_dir.mkdir(mode=0o711, parents=True, exist_ok=True)
        self.run_dir.chmod(0o711)
        self.logs.mkdir(mode=0o700, parents=True, exist_ok=True)
        # seed-local imports the app, whose counters open their files here at import.
        (self.run_dir / "prometheus").mkdir(mode=0o700, parents=True, exist_ok=True)
        migrations.apply(self.database_url)
        subprocess.run(
            [str(BIN / "flask"), "--app", "app", "seed-local"],
            cwd=REPO,
            env=self.base_env(),
            check=True,
            stdout=subprocess.DEVNULL,
        )

    def start_coordinator(self, name: str = "coordinator", timeout: float = 30.0) -> None:
        """Start gunicorn and wait until /readyz answers 200."""
        self.coordinators.add(name)
        self._spawn(name, [str(BIN / "gunicorn"), "-c", str(REPO / "gunicorn.conf.py")])
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Poll /readyz until it answers 200."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{self.url}/readyz", timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass  # not listening yet, or the workers are still booting
            time.sleep(0.1)
        raise TimeoutError(f"the coordinator at {self.url} was not ready in {timeout} s")

    def start_worker(self, name: str, *args: str) -> subprocess.Popen:
        """Start a chunkwise-worker with a readable worker id."""
        return self._spawn(
            name,
            [str(BIN / "chunkwise-worker"), "--coordinator", self.url, "--worker-id", name, *args],
            self.worker_env(),
        )

    def _spawn(
        self, name: str, argv: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        self.logs.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Logs carry trace ids, worker ids and job ids: the owner's alone, like the data.
        fd = os.open(self.logs / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        log = os.fdopen(fd, "ab")
        process = subprocess.Popen(
            argv,
            cwd=REPO,
            env=self.base_env() if env is None else env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes[name] = process
        return process

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Signal a process's whole group (gunicorn's workers die with their arbiter)."""
        process = self.processes[name]
        if process.poll() is None:
            os.killpg(process.pid, sig)
        process.wait(timeout=30)

    def stop(self) -> None:
        """Stop everything this stack started: SIGTERM, then SIGKILL after a grace period."""
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def follow_job(
        self,
        client: CoordinatorClient,
        job: dict,
        on_answer: Callable[[dict], None] = lambda job: None,
    ) -> dict:
        """Wait until the job ends, calling on_answer with the job after each watch answers:
        as it ends, and every PROGRESS_SECONDS on the way.

        An answer at every change would cost the coordinator a view of the job per chunk done,
        which a short job pays for in its own wall time (a plain 8-chunk job took 6% longer).
        StackStopped if the coordinator, or every worker, exits first: the job would never end.
        """
        version = None
        while job["status"] not in FINISHED:
            changed, version = client.watch_job(
                job["id"], version, wait_seconds=PROGRESS_SECONDS, until_finished=True
            )
            job = changed or job
            on_answer(job)
            self.check_running()
        return job

    def check_running(self) -> None:
        """StackStopped unless the coordinator and at least one worker are running."""
        exited = {name: p.returncode for name, p in self.processes.items() if p.poll() is not None}
        workers = [name for name in self.processes if name not in self.coordinators]
        gone = [n for n in self.coordinators if n in exited]
        if workers and all(name in exited for name in workers):
            gone += workers
        if gone:
            codes = ", ".join(f"{name} exited with {exited[name]}" for name in gone)
            raise StackStopped(f"{codes}; the logs are in {self.logs}")

    def client(self, token: str | None = None) -> CoordinatorClient:
        """The chunkwise command's client, as the user (or the given token)."""
        return CoordinatorClient(self.url, token or self.tokens.user)

    def scrape(self) -> str:
        """GET /metrics as Prometheus would, with the scrape token, on a fresh connection."""
        response = requests.get(
            f"{self.url}/metrics",
            headers={"Authorization": f"Bearer {self.tokens.metrics}"},
            timeout=10,
        )
        assert response.status_code == 200, response.text
        return response.text

    def api(self, token: str | None = None) -> requests.Session:
        """A requests session authenticated as the user (or the given token)."""
        session = settled_session(self.url)
        session.headers["Authorization"] = f"Bearer {token or self.tokens.user}"
        return session


def stop_on_sigterm() -> None:
    """Let SIGTERM unwind like Ctrl-C, so the finally blocks and atexit stop what was started.

    The stack's processes and the embedded server run in sessions of their own, so a signal
    to this process reaches none of them; killed outright, it would leave them all running.
    """
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    # The first signal unwinds; the next ones (make forwards a group's SIGTERM a moment after
    # it arrives, a person presses Ctrl-C twice) must not cut the clean-up short.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def database_url(run_dir: Path) -> str:
    """DATABASE_URL when set, else an embedded server under run_dir/pg (stopped at exit)."""
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    from devstack import embedded_pg

    return embedded_pg.start(run_dir / "pg", keep=True)
