"""Chunkwise across separate hosts: two coordinators and two workers, each on its own network
namespace, with PostgreSQL and the object store on two more (issue 38).

The hosts share nothing but the private subnet devstack/hosts.py makes: no disk directory, no
loopback. moto's S3 server (moto[server] from PyPI) stands in for S3. The test process itself
sits on a `client` host. Skipped only where this machine cannot make network namespaces.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import psycopg
import pytest
import requests
from psycopg.rows import dict_row

from app import migrations
from bench.reliability import invariants
from devstack import embedded_pg, hosts
from devstack.observe import FAST, SHORT_POLL, Jobs, totals_of, wait_for
from devstack.sample_csv import generate_csv
from devstack.stack import BIN, REPO, Tokens

ADDRESSES = {
    "db": "10.231.0.2",
    "s3": "10.231.0.3",
    "client": "10.231.0.4",
    "coord-a": "10.231.0.11",
    "coord-b": "10.231.0.12",
    "worker-1": "10.231.0.21",
    "worker-2": "10.231.0.22",
}
DATABASE_URL = f"postgresql://postgres@{ADDRESSES['db']}:5432/postgres"
S3_URL = f"http://{ADDRESSES['s3']}:5000"
BUCKET = "chunkwise-hosts"
PORT = 8000
S3_SETTINGS = {
    "AWS_ENDPOINT_URL": S3_URL,
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
}
SECRET_KEY = "many-hosts-" + "k" * 40  # the same on both coordinators: their sessions agree


@dataclass
class Coordinator:
    """One coordinator host as a user sees it (what devstack.observe.Jobs needs)."""

    host: str
    tokens: Tokens

    @property
    def url(self) -> str:
        """Its base URL on the subnet."""
        return f"http://{ADDRESSES[self.host]}:{PORT}"

    def api(self) -> requests.Session:
        """A session authenticated as the user."""
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {self.tokens.user}"
        return session


@dataclass
class Rig:
    """The hosts, and the processes started on them; the test process is on `client`."""

    network: hosts.Network
    home: Path
    logs: Path
    tokens: Tokens = field(default_factory=Tokens)
    running: dict[str, subprocess.Popen] = field(default_factory=dict)
    starts: Iterator[int] = field(default_factory=itertools.count)

    def coordinator(self, host: str) -> Coordinator:
        """The coordinator on `host`, as the user sees it."""
        return Coordinator(host, self.tokens)

    def coordinator_env(self, host: str) -> dict[str, str]:
        """A coordinator's environment: its own directories, the shared database and bucket."""
        own = self.home / host
        return {
            **os.environ,
            **FAST,
            **S3_SETTINGS,
            "PYTHONPATH": str(REPO),
            "DATABASE_URL": DATABASE_URL,
            "CHUNKWISE_TEMP_DIR": str(own / "tmp"),
            "CHUNKWISE_ARCHIVE_DIR": str(own / "archive"),
            "PROMETHEUS_MULTIPROC_DIR": str(own / "prometheus"),
            # Where gunicorn puts its control socket when the directory exists: else every
            # coordinator would bind the one $HOME/.gunicorn/gunicorn.ctl.
            "XDG_RUNTIME_DIR": str(own / "run"),
            "CHUNKWISE_ARCHIVE_URL": f"s3://{BUCKET}/hosts",
            "CHUNKWISE_BIND": f"{ADDRESSES[host]}:{PORT}",
            "CHUNKWISE_WEB_WORKERS": "1",
            "CHUNKWISE_SECRET_KEY": SECRET_KEY,
            "CHUNKWISE_SEED_USER_TOKEN": self.tokens.user,
            "CHUNKWISE_SEED_OPERATOR_TOKEN": self.tokens.operator,
            "CHUNKWISE_SEED_WORKER_TOKEN": self.tokens.worker,
            "CHUNKWISE_METRICS_TOKEN": self.tokens.metrics,
        }

    def run(self, name: str, host: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        """Start argv on `host`, logging to logs/<name>.log."""
        process = self.network.spawn(host, argv, log=self.logs / f"{name}.log", env=env, cwd=REPO)
        self.running[name] = process
        return process

    def start_coordinator(self, host: str) -> None:
        """Start gunicorn on `host` and wait until /readyz answers 200."""
        for own in ("prometheus", "run"):
            (self.home / host / own).mkdir(mode=0o700, parents=True, exist_ok=True)
        argv = [str(BIN / "gunicorn"), "-c", str(REPO / "gunicorn.conf.py")]
        self.run(host, host, argv, self.coordinator_env(host))
        url = f"{self.coordinator(host).url}/readyz"
        with self.network.inside("client"):
            wait_for(lambda: _status(url) == 200, timeout=30, what=f"gunicorn on {host}")

    def start_worker(self, host: str, coordinator: str, *args: str) -> None:
        """Start a worker on `host` talking to the coordinator on `coordinator` only."""
        # Its whole environment: no database, no bucket, no other credential.
        env = {
            "PATH": os.environ["PATH"],
            "PYTHONPATH": str(REPO),
            "CHUNKWISE_WORKER_TOKEN": self.tokens.worker,
        }
        name = f"{host}-{next(self.starts)}"  # a new worker id, and log, for each start
        url = self.coordinator(coordinator).url
        argv = [str(BIN / "chunkwise-worker"), "--coordinator", url, "--worker-id", name]
        self.run(name, host, [*argv, *SHORT_POLL, *args], env)

    def kill(self, name: str) -> None:
        """SIGKILL one process and its group, as a host losing power would."""
        process = self.running.pop(name)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def kill_workers(self) -> None:
        """SIGKILL every worker started so far."""
        for name in [n for n in self.running if n.startswith("worker-")]:
            self.kill(name)


def _status(url: str) -> int | None:
    try:
        return requests.get(url, timeout=2).status_code
    except requests.RequestException:
        return None


def _connects() -> bool:
    try:
        psycopg.connect(DATABASE_URL, connect_timeout=2).close()
        return True
    except psycopg.OperationalError:
        return False


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    """Seven hosts, PostgreSQL migrated and seeded on `db`, moto with the bucket on `s3`."""
    reason = hosts.unavailable()
    if reason:
        pytest.skip(f"cannot make network namespaces here: {reason}")
    # Not under pytest's 0700 basetemp, which PostgreSQL's own user cannot enter; the logs go
    # there, to outlive a failed run.
    home = Path(tempfile.mkdtemp(prefix="chunkwise-hosts-"))
    home.chmod(0o755)
    try:
        with hosts.Network() as network:
            for name, address in ADDRESSES.items():
                network.add_host(name, address)
            rig = Rig(network, home, tmp_path_factory.mktemp("many-hosts-logs"))
            postgres = embedded_pg.foreground(home / "pg", ADDRESSES["db"], 5432, hosts.SUBNET)
            rig.run("postgres", "db", postgres, dict(os.environ))
            moto = [str(BIN / "moto_server"), "-H", ADDRESSES["s3"], "-p", "5000"]
            rig.run("moto", "s3", moto, dict(os.environ))
            with network.inside("client"):
                wait_for(_connects, timeout=30, what="PostgreSQL on the db host")
                migrations.apply(DATABASE_URL)
                wait_for(lambda: _status(S3_URL), timeout=30, what="moto on the s3 host")
                _s3().create_bucket(Bucket=BUCKET)
                seed = [str(BIN / "flask"), "--app", "app", "seed-local"]
                (home / "client" / "prometheus").mkdir(parents=True)
                assert rig.run("seed", "client", seed, rig.coordinator_env("client")).wait(60) == 0
            yield rig
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def coordinators(rig):
    """Both coordinators up (one a test killed is started again), and no worker."""
    for host in ("coord-a", "coord-b"):
        if host not in rig.running:
            rig.start_coordinator(host)
    try:
        yield rig
    finally:
        rig.kill_workers()


@pytest.fixture
def on_client(coordinators):
    """The test runs from the `client` host."""
    with coordinators.network.inside("client"):
        yield coordinators


@pytest.fixture
def db(on_client):
    """A connection to the db host's PostgreSQL, for assertions."""
    with psycopg.connect(
        DATABASE_URL, autocommit=True, row_factory=dict_row, connect_timeout=10
    ) as conn:
        yield conn


def _s3():
    return boto3.client(
        "s3",
        endpoint_url=S3_URL,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )


def completed_attempts(db, job_id: str) -> list[int]:
    """How many completed attempts each chunk of the job has, by chunk index."""
    rows = db.execute(
        """SELECT t.chunk_index, count(a.id) FILTER (WHERE a.outcome = 'completed') AS n
             FROM tasks t LEFT JOIN task_attempts a ON a.task_id = t.id
            WHERE t.job_id = %s GROUP BY t.chunk_index ORDER BY t.chunk_index""",
        (job_id,),
    ).fetchall()
    return [r["n"] for r in rows]


def test_the_hosts_reach_each_other_only_on_their_own_subnet(coordinators):
    rig = coordinators
    coordinator = rig.coordinator("coord-a").url
    root = subprocess.run([hosts.IP, "-o", "addr"], capture_output=True, text=True, check=True)
    assert "10.231.0." not in root.stdout, "the subnet is no part of this machine's own network"
    with rig.network.inside("worker-1"):
        assert _status(f"{coordinator}/readyz") == 200
        assert _status(f"http://127.0.0.1:{PORT}/readyz") is None, "a host's loopback is its own"


def test_a_csv_uploaded_to_one_host_is_computed_exactly_through_another(on_client, db):
    rig = on_client
    data = generate_csv(4000, seed=38)
    job = Jobs(rig.coordinator("coord-a"), db).submit(data, 6)

    rig.start_worker("worker-1", "coord-b", "--capacity", "2")
    rig.start_worker("worker-2", "coord-b", "--capacity", "2")
    done = Jobs(rig.coordinator("coord-b"), db).wait(job["id"], "succeeded", timeout=30)

    assert done["result"] == totals_of(data)
    # One attempt per chunk: coord-b, which never saw the upload, served every read.
    assert completed_attempts(db, job["id"]) == [1] * 6
    attempts = db.execute(
        "SELECT count(*) AS n FROM task_attempts WHERE task_id IN"
        " (SELECT id FROM tasks WHERE job_id = %s)",
        (job["id"],),
    ).fetchone()["n"]
    assert attempts == 6
    stored = _s3().list_objects_v2(Bucket=BUCKET, Prefix="hosts/")["KeyCount"]
    assert stored >= 1, "the upload is in the bucket"
    for host in ("coord-a", "coord-b"):
        assert not any((rig.home / host / "archive").rglob("*")), f"{host} kept nothing on disk"
    registered = db.execute("SELECT DISTINCT host FROM coordinators ORDER BY host").fetchall()
    assert [r["host"] for r in registered] == ["coord-a", "coord-b"]
    assert invariants.violations(db) == {}


def test_ten_jobs_round_robin_over_both_hosts_all_succeed_exactly(on_client, db):
    rig = on_client
    rig.start_worker("worker-1", "coord-a", "--capacity", "2")
    rig.start_worker("worker-2", "coord-b", "--capacity", "2")
    submitted = []
    for n in range(10):
        data = generate_csv(1500, seed=100 + n)
        entry = rig.coordinator(("coord-a", "coord-b")[n % 2])
        submitted.append((Jobs(entry, db).submit(data, 4), data))

    for n, (job, data) in enumerate(submitted):
        other = rig.coordinator(("coord-b", "coord-a")[n % 2])
        done = Jobs(other, db).wait(job["id"], "succeeded", timeout=30)
        assert done["result"] == totals_of(data)
        assert completed_attempts(db, job["id"]) == [1] * 4
    served = db.execute(
        "SELECT DISTINCT split_part(worker_id, '-', 2) AS host FROM task_attempts"
        " WHERE task_id IN (SELECT id FROM tasks WHERE job_id = ANY(%s))",
        ([job["id"] for job, _ in submitted],),
    ).fetchall()
    assert {r["host"] for r in served} == {"1", "2"}, "both hosts' workers took chunks"
    assert invariants.violations(db) == {}


def test_a_job_survives_sigkill_of_its_coordinator_finishing_on_the_other(on_client, db):
    rig = on_client
    data = generate_csv(6000, seed=39)
    job = Jobs(rig.coordinator("coord-a"), db).submit(data, 8)
    # Each chunk held for a second after computing it, so coord-a dies with leases out.
    slow = ("--capacity", "1", "--fault", "pause-after-compute=1")
    rig.start_worker("worker-1", "coord-a", *slow)
    rig.start_worker("worker-2", "coord-a", *slow)

    def mid_job() -> bool:
        row = db.execute(
            "SELECT count(*) FILTER (WHERE status = 'completed') AS done,"
            "       count(*) FILTER (WHERE status = 'leased') AS leased"
            "  FROM tasks WHERE job_id = %s",
            (job["id"],),
        ).fetchone()
        return row["done"] >= 1 and row["leased"] >= 1

    wait_for(mid_job, timeout=30, what="a chunk done and another leased through coord-a")
    rig.kill("coord-a")
    # The workers move host: what they held through coord-a is left to its lease.
    rig.kill_workers()
    rig.start_worker("worker-1", "coord-b", "--capacity", "2")
    rig.start_worker("worker-2", "coord-b", "--capacity", "2")
    done = Jobs(rig.coordinator("coord-b"), db).wait(job["id"], "succeeded", timeout=40)

    assert done["result"] == totals_of(data)
    assert completed_attempts(db, job["id"]) == [1] * 8, "no chunk merged twice"
    expired = db.execute(
        "SELECT count(*) AS n FROM task_attempts a JOIN tasks t ON t.id = a.task_id"
        " WHERE t.job_id = %s AND a.outcome = 'lease_expired'",
        (job["id"],),
    ).fetchone()["n"]
    assert expired >= 1, "a lease taken through coord-a was expired by coord-b and re-run"
    assert invariants.violations(db) == {}
