"""JSON log lines for the worker process, each carrying the ids of what it is about."""

from __future__ import annotations

import contextvars
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from pythonjsonlogger.json import JsonFormatter

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

# A context variable rather than thread-locals: each chunk thread and the heartbeat thread
# bind their own ids, and a scope restores the outer ones when it ends.
_fields: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    "worker_log_fields", default=None
)


@contextmanager
def log_scope(**fields: object) -> Iterator[None]:
    """Add fields (trace_id, task_id, ...) to every log line of this thread inside the block."""
    known = {k: v for k, v in fields.items() if v is not None}
    token = _fields.set({**(_fields.get() or {}), **known})
    try:
        yield
    finally:
        _fields.reset(token)


class ContextFields(logging.Filter):
    """Copy the scope's fields, then process-wide ones, onto records that lack them."""

    def __init__(self, **static: object):
        super().__init__()
        self.static = {k: v for k, v in static.items() if v is not None}

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in {**self.static, **(_fields.get() or {})}.items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def configure_logging(
    *, worker_id: str, level: int | str = logging.INFO, stream: TextIO | None = None
) -> logging.Handler:
    """Send JSON lines to stderr, each stamped with worker_id and the current scope's ids."""
    handler = logging.StreamHandler(stream or sys.stderr)
    # The same keys as the coordinator's lines, so one query reads both.
    renames = {"asctime": "time", "levelname": "level", "name": "logger"}
    handler.setFormatter(JsonFormatter(FORMAT, rename_fields=renames))
    # On the handler, not a logger, so records from every module (urllib3 too) get the fields.
    handler.addFilter(ContextFields(worker_id=worker_id))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # urllib3 logs every connection at DEBUG; the worker's own lines are the ones to read.
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    return handler
