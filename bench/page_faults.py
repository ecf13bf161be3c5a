"""What new memory costs this machine: the time to fault in a page no process has touched.

On the Firecracker VMs these figures come from, memory the guest has not touched since it
booted, or has handed back to the host since, costs several times more to fault in than memory
it recycles (2026-12-07: 12.5 µs a 4 KiB page against 2.3). Whatever grows the page cache, an
upload's spool for one, pays that, and a job's times move with it while a plain pass, which
reuses its own memory, does not: bench.report takes this figure after every job, so that a
reader can tell which kind of memory a turn ran on.
"""

from __future__ import annotations

import mmap
import time

PAGE = mmap.PAGESIZE


def fault_microseconds(mib: int = 64) -> float:
    """Microseconds a page to touch `mib` MiB of new anonymous memory, page by page (freed
    after)."""
    size = mib << 20
    with mmap.mmap(-1, size) as memory:
        if hasattr(mmap, "MADV_NOHUGEPAGE"):
            memory.madvise(mmap.MADV_NOHUGEPAGE)  # one fault a page, not one a huge page
        started = time.perf_counter()
        for offset in range(0, size, PAGE):
            memory[offset] = 1
        return (time.perf_counter() - started) * 1e6 / (size // PAGE)
