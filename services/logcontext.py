"""Fields every log line of the current request or loop pass carries: trace_id, job_id, ..."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Iterator
from contextlib import contextmanager

# Never mutated in place (bind and scope replace it), so one shared empty default is safe.
_EMPTY: dict = {}
_context: contextvars.ContextVar[dict] = contextvars.ContextVar(
    "chunkwise_log_context", default=_EMPTY
)  # noqa: B039


def begin(**values: object) -> None:
    """Start a fresh context (a new request on a reused thread must not inherit the last one)."""
    _context.set({k: v for k, v in values.items() if v is not None})


def bind(**values: object) -> None:
    """Add fields to the current context (None values are ignored)."""
    _context.set({**_context.get(), **{k: v for k, v in values.items() if v is not None}})


@contextmanager
def scope(**values: object) -> Iterator[None]:
    """Bind fields for the duration of a block, then restore the previous context."""
    token = _context.set({**_context.get(), **{k: v for k, v in values.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


class ContextFilter(logging.Filter):
    """Copy the bound fields onto each record unless the call passed its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _context.get().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True
