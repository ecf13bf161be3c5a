"""JSON log lines on stderr, each carrying the bound trace and job fields."""

from __future__ import annotations

import logging
import sys

from pythonjsonlogger.json import JsonFormatter

from services.logcontext import ContextFilter


def configure(level: str = "INFO", stream=None) -> None:
    """Send every logger's records to one JSON handler (idempotent)."""
    root = logging.getLogger()
    if any(getattr(h, "chunkwise", False) for h in root.handlers):
        root.setLevel(level)
        return
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.chunkwise = True
    handler.setFormatter(
        JsonFormatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            timestamp=False,
        )
    )
    handler.addFilter(ContextFilter())
    root.addHandler(handler)
    root.setLevel(level)
