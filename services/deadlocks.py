"""Running a service call again when PostgreSQL ended its transaction to break a deadlock."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from psycopg.errors import DeadlockDetected

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

# Runs in all: a deadlock that comes back twice more is no accident of timing.
ATTEMPTS = 3


def rerun_deadlocks(call: Callable[P, R]) -> Callable[P, R]:
    """Run the call again when its transaction was a deadlock's victim.

    PostgreSQL rolled the victim back whole and let the other transaction go on, so a fresh
    run starts from what that one committed. Jobs of one graph are locked in one order, the
    order they were created, and a transaction's turns are taken at once (see
    services/settlement.py). That order cannot see a server clock set back, nor one cycle
    of three: a submission holding one prerequisite and waiting for another, which a batch
    of results is finishing, while that batch waits for the first one's cancel to end, and
    the cancel for the submission (tests/integration/test_pipeline_storms.py met it in one
    dense storm of 290). Every call that may be such a victim runs again here.
    """

    @functools.wraps(call)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        for attempt in range(1, ATTEMPTS):
            try:
                return call(*args, **kwargs)
            except DeadlockDetected:
                logger.warning(
                    "transaction ended to break a deadlock; running it again",
                    extra={"event": "deadlock_rerun", "call": call.__name__, "attempt": attempt},
                )
        return call(*args, **kwargs)

    return run
