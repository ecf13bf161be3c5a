"""What storing a result's value (sql/0030) costs beside a manifest result, in alternating turns.

python -m bench.result_values [--url postgresql://postgres@127.0.0.1:5432/postgres]
    [--turns 20] [--batch 100]

Builds a database at head and an in-process coordinator (the Flask test client: no network),
then takes turns: each turn submits a job of `--batch` args tasks, claims them all, and times
only their results, sent as one batch (POST /api/v1/tasks/results) or one call each (POST
/api/v1/tasks/{id}/result); manifest results and value results alternate, so both see the
same machine. Prints every turn, then the median and range of each and their ratios.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from app import create_app, migrations
from app.runtime import close
from services import credentials

WORKER = "bench-worker"


def main() -> None:
    """Run the turns and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    name = f"bench_results_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        run(_with_dbname(args.url, name), args.turns, args.batch)
    finally:
        with psycopg.connect(args.url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def run(url: str, turns: int, batch: int) -> None:
    """Alternate the four kinds of turn and print their timings."""
    migrations.apply(url)
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(
            {
                "DATABASE_URL": url,
                "CHUNKWISE_TEMP_DIR": str(Path(tmp) / "tmp"),
                "CHUNKWISE_ARCHIVE_DIR": str(Path(tmp) / "archive"),
                "CHUNKWISE_ALLOWED_WORKLOADS": "echo",
                "CHUNKWISE_MANIFEST_MAX_QUEUED_TASKS": "1000000",
                "CHUNKWISE_LOG_LEVEL": "WARNING",
            }
        )
        rt = app.extensions["chunkwise.runtime"]
        try:
            issued = {
                t.name: t.token
                for t in credentials.seed_local(
                    rt.pool, user_token=None, operator_token=None, worker_token=None
                )
            }
            bench = Bench(app.test_client(), issued["compute_user"], issued["local-worker"])
            kinds = [
                ("batch", "manifest"),
                ("batch", "value"),
                ("single", "manifest"),
                ("single", "value"),
            ]
            timings: dict[tuple[str, str], list[float]] = {k: [] for k in kinds}
            for turn in range(turns):
                # Each turn in the other order too, so neither kind always goes first.
                for kind in kinds if turn % 2 == 0 else kinds[::-1]:
                    timings[kind].append(bench.turn(*kind, batch))
                print(
                    f"turn {turn + 1:3}: "
                    + "  ".join(f"{c}/{r} {timings[(c, r)][-1]:7.1f} ms" for c, r in kinds)
                )
        finally:
            close(rt)
    print(f"\n{batch} results a turn; milliseconds to send them (median, range):")
    for kind in kinds:
        t = timings[kind]
        print(
            f"  {kind[0]:6} {kind[1]:8} {statistics.median(t):8.1f}  [{min(t):.1f}, {max(t):.1f}]"
        )
    for call in ("batch", "single"):
        ratios = [
            v / m
            for m, v in zip(timings[(call, "manifest")], timings[(call, "value")], strict=True)
        ]
        print(
            f"  {call}: value/manifest, per turn: median {statistics.median(ratios):.3f} "
            f"[{min(ratios):.3f}, {max(ratios):.3f}]"
        )


class Bench:
    """Submits, claims and answers jobs through the API, as a worker and a user would."""

    def __init__(self, client, user_token: str, worker_token: str):
        self.client = client
        self.user = {"Authorization": f"Bearer {user_token}"}
        self.worker = {"Authorization": f"Bearer {worker_token}"}

    def turn(self, call: str, result: str, batch: int) -> float:
        """Submit and claim `batch` tasks; return the milliseconds their results took."""
        job = {"workload": "echo", "tasks": [{"args": {"x": i}} for i in range(batch)]}
        assert self.client.post("/api/v1/jobs", json=job, headers=self.user).status_code == 201
        claim = {"worker_id": WORKER, "workloads": ["echo"], "capacity": batch}
        tasks = self.client.post("/api/v1/tasks/claim", json=claim, headers=self.worker).json[
            "tasks"
        ]
        items = [_item(t, result) for t in tasks]
        started = time.perf_counter()
        if call == "batch":
            body = {"worker_id": WORKER, "results": items}
            answer = self.client.post("/api/v1/tasks/results", json=body, headers=self.worker)
            assert answer.status_code == 200
        else:
            for item in items:
                task_id = item.pop("task_id")
                body = {"worker_id": WORKER, **item}
                answer = self.client.post(
                    f"/api/v1/tasks/{task_id}/result", json=body, headers=self.worker
                )
                assert answer.status_code == 200
        return (time.perf_counter() - started) * 1000


def _item(task: dict, result: str) -> dict:
    lease = {"task_id": task["task_id"], "attempt": task["attempt"]}
    lease["lease_token"] = task["lease_token"]
    if result == "value":
        return {**lease, "value": {"square": task["chunk_index"] ** 2}}
    uri = f"s3://out/{task['task_id']}"
    return {**lease, "result_uri": uri, "result_sha256": hashlib.sha256(uri.encode()).hexdigest()}


def _with_dbname(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


if __name__ == "__main__":
    main()
