"""Facts about the running process (standard library only, so the worker imports it too)."""

from __future__ import annotations

import resource
import sys


def peak_rss_bytes() -> int:
    """Return this process's peak resident set size in bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak if sys.platform == "darwin" else peak * 1024
