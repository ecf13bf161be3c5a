"""The reliability report's rig against the real stack, on whatever server the suite runs on.

CI runs on the embedded server, reached over a Unix socket; `make reliability` on a fresh
machine does too, and broke there once unseen, since nothing else ran the rig.
"""

from __future__ import annotations

import time

from bench.reliability.harness import Rig, connect


def test_the_rig_sees_every_coordinator_process_past_its_start_checks(stack, database_url):
    rig = Rig(stack, database_url, connect(database_url), deadline=time.monotonic() + 60)
    try:
        started = time.monotonic()
        rig.wait_booted(timeout=20)

        assert time.monotonic() - started < 20
    finally:
        rig.db.close()
