"""`make demo`'s second job: a function of this module as a task, through the Python SDK.

The worker side is this module's `worker`, run as `chunkwise-worker --app devstack.sdk_demo`;
the producer side submits one task per number, waits, and reads the values back.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from worker_cli import Client, JobFailed, WaitTimedOut, Worker
from worker_cli.client import RequestRejected

if TYPE_CHECKING:  # the worker process imports this module, and needs none of the stack
    from devstack.stack import LocalStack

WORKLOAD = "collatz"
NUMBERS = range(1, 301)
SHOWN = (1, 7, 27, 97, 300)

worker = Worker()


@worker.task(WORKLOAD)
def collatz_steps(args, ctx):
    """How many halvings and triplings-plus-one take args["n"] to 1."""
    n, steps = args["n"], 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def serve_workload(stack: LocalStack) -> None:
    """Have the stack's coordinator serve the demo's workload, added at run time as an operator."""
    with Client(stack.url, stack.tokens.operator) as operator:
        try:
            operator.api.add_workload(WORKLOAD, {})
        except RequestRejected as exc:
            # 409: an earlier run over the same database (.run/) added it already.
            if exc.status != 409:
                raise


def run(stack: LocalStack) -> int:
    """Submit one task per number, run them on an --app worker, print them beside the expected."""
    started = time.monotonic()
    with Client(stack.url, stack.tokens.user) as client:
        job = client.submit(WORKLOAD, [{"n": n} for n in NUMBERS], labels={"demo": "sdk"})
        say(f"\nsdk job:   {job['id']}, {len(NUMBERS)} tasks of {WORKLOAD} (devstack/sdk_demo.py)")
        stack.start_worker("sdk-worker", "--app", "devstack.sdk_demo:worker", "--burst")
        try:
            client.wait(job["id"], timeout=120)
        except (JobFailed, WaitTimedOut) as exc:
            say(f"status:    {exc}")
            return 1
        values = client.results(job["id"])
    expected = [collatz_steps({"n": n}, None) for n in NUMBERS]
    say(f"status:    succeeded in {time.monotonic() - started:.2f} s, results read back in order")
    say(f"{'n':>10} {'task result':>22} {'computed here':>22}")
    for n in SHOWN:
        got, want = values[n - 1], expected[n - 1]
        say(f"{n:>10} {got!s:>22} {want!s:>22}  {'ok' if got == want else 'MISMATCH'}")
    matching = sum(got == want for got, want in zip(values, expected, strict=False))
    say(f"{'all':>10} {f'{matching}/{len(expected)} match':>22}")
    return 0 if values == expected else 1


def say(line: str) -> None:
    """Print a line of the demo's log."""
    print(line, flush=True)
