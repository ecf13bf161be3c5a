"""Where a CSV job's time goes: the upload's steps and each chunk's, on both samples.

python -m bench.phases [--records 1000000] [--runs 5]. The upload's steps run in this
process on the sample's bytes (the client's body, werkzeug's multipart parser, the raw-body
reader, spooling, hashing, split); the chunk's steps run against a real coordinator (this
process claims the chunks as a worker, so it can time the fetch, summarise and the result
apart). Every figure is the median and range of --runs turns, the steps taken in turns so
that a machine that changes speed moves them alike, beside a plain csv.reader pass timed the
same way.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from flask import Flask, request
from werkzeug.formparser import parse_form_data
from werkzeug.test import EnvironBuilder

from app.uploads import BODY_BLOCK_SIZE, Spool, init_app, spooled_body, uploaded
from bench.csv_core import SAMPLES
from bench.turns import spread
from bench.yardsticks import plain_pass
from devstack.stack import REPO, LocalStack, database_url, stop_on_sigterm
from services import archive, csvstats
from services.csvjobs import hash_and_split
from services.csvstats import columnar, parity
from services.csvstats.planning import scan_file
from worker_cli.client import CoordinatorClient
from worker_cli.uploads import FileBody, MultipartUpload

COLUMN = "value"
CHUNKS = 8
SEED = 20261202
# A worker id is bound to the credential that first used it, and each run seeds new tokens into
# the database .run/phases keeps: a name of its own per run.
WORKER = f"phases-bench-{uuid.uuid4().hex[:8]}"


class _Discard(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        return len(data)


def in_turns(runs: int, steps: dict[str, Callable[[], object]]) -> dict[str, tuple[list, list]]:
    """Each step run `runs` times in turns; name -> (wall seconds, CPU seconds) of every turn."""
    timed: dict[str, tuple[list, list]] = {name: ([], []) for name in steps}
    for _ in range(runs):
        for name, step in steps.items():
            wall, cpu = time.perf_counter(), time.process_time()
            step()
            timed[name][0].append(time.perf_counter() - wall)
            timed[name][1].append(time.process_time() - cpu)
    return timed


def upload_steps(path: Path, data: bytes, spool_dir: Path) -> dict[str, Callable[[], object]]:
    """The upload's steps, each a callable over the sample."""
    fields = [("column", COLUMN), ("chunks", str(CHUNKS))]
    app = Flask(__name__)
    init_app(app, spool_dir, len(data) + 1)

    def multipart_body() -> bytes:
        with path.open("rb") as f:
            body = MultipartUpload(fields, "file", f, "sample.csv")
            return b"".join(body), body.content_type

    encoded, content_type = multipart_body()

    def client_multipart() -> int:
        with path.open("rb") as f:
            return sum(map(len, MultipartUpload(fields, "file", f, "sample.csv")))

    def client_raw() -> int:
        with path.open("rb") as f:
            return sum(map(len, FileBody(f)))

    def environ(body: bytes, mimetype: str) -> dict:
        return EnvironBuilder(
            method="POST", input_stream=io.BytesIO(body), content_type=mimetype,
            content_length=len(body),
        ).get_environ()  # fmt: skip

    def multipart_parse_only() -> object:
        return parse_form_data(
            environ(encoded, content_type), stream_factory=lambda *a, **k: _Discard()
        )

    def multipart_to_spool() -> object:
        with app.request_context(environ(encoded, content_type)):
            upload = uploaded("file")
            upload.wait_until_on_disk()
            upload.path.unlink()  # submit_csv_job maps the spool: nothing is read back
            return upload

    def raw_to_spool() -> object:
        with app.request_context(environ(data, "text/csv")):
            assert request.mimetype == "text/csv"
            upload = spooled_body()
            upload.wait_until_on_disk()
            upload.path.unlink()
            return upload

    def spool_only() -> None:
        with tempfile.NamedTemporaryFile(dir=spool_dir) as f:
            for at in range(0, len(data), BODY_BLOCK_SIZE):
                f.write(data[at : at + BODY_BLOCK_SIZE])

    def spool_finished() -> None:
        spool = Spool(spool_dir)
        for at in range(0, len(data), BODY_BLOCK_SIZE):
            spool.write(data[at : at + BODY_BLOCK_SIZE])
        spooled = spool.finish()
        spooled.wait_until_on_disk()
        spooled.path.unlink()

    on_disk = archive.Spooled(path, len(data))

    return {
        "yardstick: plain csv.reader pass": lambda: plain_pass(data, COLUMN),
        "client: multipart body from disk": client_multipart,
        "client: raw body from disk": client_raw,
        "server: multipart parse only (no spool)": multipart_parse_only,
        "server: multipart parse + spool": multipart_to_spool,
        "server: raw body read + spool": raw_to_spool,
        "spool: write to disk": spool_only,
        "spool: write, writeback, fsync (Spool)": spool_finished,
        "hash: sha256 of the file": lambda: hashlib.sha256(data).hexdigest(),
        "split: quote scan (scan_file)": lambda: scan_file(data, ","),
        "split: all (numpy plan, chunk digests)": lambda: csvstats.split(data, COLUMN, ",", CHUNKS),
        "split + the file's sha256 beside it": lambda: hash_and_split(on_disk, COLUMN, ",", CHUNKS),
        "split: parity counts, no numpy (the fallback)": lambda: parity.plan_by_parity(
            data, ",", CHUNKS
        ),
    }


def chunk_steps(stack: LocalStack, path: Path, form: bool) -> dict[str, float]:
    """Submit the sample with no workers running, then claim, fetch, summarise and commit
    every chunk from here; return the POST's wall seconds and the sum over the chunks of
    each chunk step's."""
    client = stack.client()
    worker = CoordinatorClient(stack.url, stack.tokens.worker)
    started = time.perf_counter()
    with path.open("rb") as f:
        client.submit_csv_job(f, column=COLUMN, chunks=CHUNKS, form=form)
    totals = {f"POST until 201 ({'multipart form' if form else 'text/csv body'})": 0.0}
    totals[next(iter(totals))] = time.perf_counter() - started
    totals.update(dict.fromkeys(("claim", "fetch (HTTP, 1 MiB blocks)", "sha256"), 0.0))
    totals.update(dict.fromkeys(("summarise", "commit result"), 0.0))
    done = 0
    while done < CHUNKS:
        started = time.perf_counter()
        tasks = worker.claim_tasks(worker_id=WORKER, workloads=["csv_stats"], capacity=1)
        totals["claim"] += time.perf_counter() - started
        for task in tasks:
            p = task["parameters"]
            started = time.perf_counter()
            with worker.stream_input(
                task["input_uri"],
                worker_id=WORKER,
                attempt=task["attempt"],
                lease_token=task["lease_token"],
            ) as stream:
                blocks = list(stream)
            fetched = time.perf_counter()
            digest = hashlib.sha256()
            for block in blocks:
                digest.update(block)
            assert digest.hexdigest() == task["input_sha256"]
            hashed = time.perf_counter()
            # As the worker's handler does: the compiled engine where it applies, else the core.
            summary = columnar.summarise_chunk(
                blocks,
                records=p["record_end"] - p["record_start"],
                planned_sha256=task["input_sha256"],
                column_index=p["column_index"],
                column=p["column"],
                delimiter=p["delimiter"],
                record_start=p["record_start"],
                first_line=p["first_line"],
            )
            summarised = time.perf_counter()
            worker.submit_result(
                task["task_id"],
                worker_id=WORKER,
                attempt=task["attempt"],
                lease_token=task["lease_token"],
                result={"summary": summary.to_dict(), "metrics": {"records": summary.records}},
            )
            totals["fetch (HTTP, 1 MiB blocks)"] += fetched - started
            totals["sha256"] += hashed - fetched
            totals["summarise"] += summarised - hashed
            totals["commit result"] += time.perf_counter() - summarised
            done += 1
    client.close()
    worker.close()
    return totals


def main(argv: list[str] | None = None) -> None:
    """Time the steps on both samples and print them beside the reference."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    stop_on_sigterm()
    run_dir = REPO / ".run" / "phases"
    run_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, generate in SAMPLES.items():
        paths[name] = run_dir / f"{name}.csv"
        paths[name].write_bytes(generate(args.records, seed=SEED))
    print(f"{os.cpu_count()} cores; {args.runs} turns; seconds, median (range)")
    for name, path in paths.items():
        data = path.read_bytes()
        timed = in_turns(args.runs, upload_steps(path, data, run_dir / "spool"))
        print(f"\n{name} sample: {args.records:,} records, {len(data) / 2**20:.1f} MiB")
        print(f"{'upload step':52s} {'wall':>22s} {'cpu':>22s}")
        for step, (wall, cpu) in timed.items():
            print(f"{step:52s} {spread(wall, ' s', 3):>22s} {spread(cpu, ' s', 3):>22s}")
    stack = LocalStack(database_url=database_url(run_dir), run_dir=run_dir / "stack")
    stack.prepare()
    stack.start_coordinator()
    try:
        for name, path in paths.items():
            turns: dict[str, list[float]] = {}
            for _ in range(args.runs):
                for form in (False, True):
                    for step, seconds in chunk_steps(stack, path, form).items():
                        turns.setdefault(step, []).append(seconds)
            print(f"\n{name} sample: the POST, then the {CHUNKS} chunks one by one, summed (wall)")
            for step, seconds in turns.items():
                print(f"{step:52s} {spread(seconds, ' s', 3):>22s}")
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
