"""One run of the chunkwise command: its calls and their retries, its output, its exit status."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from worker_cli.client import (
    CoordinatorClient,
    CoordinatorError,
    CoordinatorUnavailable,
    new_trace_id,
)

EXIT_OK = 0
EXIT_JOB_UNSUCCESSFUL = 1
EXIT_USAGE = 2
EXIT_HTTP_ERROR = 3
EXIT_UNREACHABLE = 4
EXIT_INTERRUPTED = 130

# Waits between attempts of a call that met a 429, a 5xx or no coordinator at all.
RETRY_DELAYS = (0.25, 0.5, 1.0)
MAX_RETRY_AFTER = 5.0


@dataclass(frozen=True)
class Invocation:
    """One run of the command: the client, where output goes, the trace id all calls share."""

    client: CoordinatorClient
    out: TextIO
    err: TextIO
    as_json: bool
    trace_id: str = field(default_factory=new_trace_id)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def call(self, method: Callable, *args, retry: bool = True, **kwargs):
        """Call a client method, retrying 429, 5xx and an unreachable coordinator a few times."""
        # A StorageFailed (507, storage_unavailable) is not retried: the disk stays full or
        # unwritable until an operator acts, and each retry would upload the file again.
        delays = RETRY_DELAYS if retry else ()
        for delay in (*delays, None):
            try:
                return method(*args, trace_id=self.trace_id, **kwargs)
            except CoordinatorUnavailable as exc:
                if delay is None:
                    raise
                self.sleep(min(exc.retry_after or delay, MAX_RETRY_AFTER))
        raise AssertionError("unreachable")

    def print(self, text: str) -> None:
        """Write human output to stdout."""
        print(text, file=self.out, flush=True)

    def print_json(self, document: object) -> None:
        """Write one JSON document to stdout."""
        print(json.dumps(document, indent=2), file=self.out, flush=True)

    def warn(self, text: str) -> None:
        """Write a note or an error to stderr."""
        print(text, file=self.err, flush=True)


def exit_status_for(exc: CoordinatorError) -> int:
    """4 when no coordinator answered, 3 for any HTTP error it answered with."""
    if isinstance(exc, CoordinatorUnavailable) and exc.status is None:
        return EXIT_UNREACHABLE
    return EXIT_HTTP_ERROR


def describe_error(exc: CoordinatorError, url: str, trace_id: str) -> str:
    """The error's code, message, HTTP status and trace id, then any field errors."""
    if exc.status is None:
        head = f"chunkwise: coordinator unreachable at {url}: {exc.message}"
    else:
        head = f"chunkwise: {exc.code or 'error'}: {exc.message} (HTTP {exc.status})"
    lines = [f"{head} (trace id {exc.trace_id or trace_id})"]
    fields = exc.details.get("fields")
    for name, problems in fields.items() if isinstance(fields, dict) else ():
        text = "; ".join(map(str, problems)) if isinstance(problems, list) else json.dumps(problems)
        lines.append(f"  {name}: {text}")
    return "\n".join(lines)
