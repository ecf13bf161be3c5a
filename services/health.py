"""Readiness: the database answers and its schema is the one this code expects."""

from __future__ import annotations

from collections.abc import Sequence

from repositories import health
from services.errors import Unavailable
from services.runtime import Runtime


def missing_migrations(rt: Runtime, expected: Sequence[str]) -> list[str]:
    """Migrations the code needs that the database lacks; Unavailable when it cannot say."""
    with rt.pool.connection(timeout=2.0) as conn:
        applied = health.applied_migrations(conn)
    return [m for m in expected if m not in applied]


def require_ready(rt: Runtime, expected: Sequence[str]) -> None:
    """Raise Unavailable naming the missing migrations, if any."""
    missing = missing_migrations(rt, expected)
    if missing:
        raise Unavailable(
            f"the schema is behind: apply {', '.join(missing)}",
            code="schema_behind",
            details={"missing_migrations": missing},
        )
