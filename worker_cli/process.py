"""Facts about the running process (standard library only; the coordinator reports them too)."""

from __future__ import annotations

import resource
import sys
from pathlib import Path

STATUS = Path("/proc/self/status")


def peak_rss_bytes() -> int:
    """Return this process's peak resident set size in bytes."""
    # Linux keeps ru_maxrss across exec, so a worker started by a large process would report
    # its parent's size; VmHWM is the high-water mark of this program's own memory.
    if STATUS.exists():
        for line in STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return peak if sys.platform == "darwin" else peak * 1024
