"""bench.page_faults: the cost of new memory, which bench.report prints every turn."""

from __future__ import annotations

import resource

from bench.page_faults import PAGE, fault_microseconds


def test_every_page_of_the_new_memory_is_faulted_in_once_and_timed():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    microseconds = fault_microseconds(4)

    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults >= (4 << 20) // PAGE
    assert 0 < microseconds < 10_000
