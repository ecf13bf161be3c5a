"""The hot statements stay within what psycopg keeps parsed between executions.

psycopg converts a statement's %(name)s placeholders with a regular expression on every
execute, except for statements it caches: at most 4 KiB and 50 parameters (longer ones are
taken for generated one-off SQL). A claim or an admission past that paid 0.2-0.6 ms of
coordinator CPU on each call (docs/performance/profile.md).
"""

from __future__ import annotations

import re

import pytest
from psycopg import _queries

from app.schemas.tasks import MAX_BATCH_RESULTS
from repositories import jobs, tasks

HOT = {
    "admission": jobs._ADMIT,
    "claim": tasks._claim_of(MAX_BATCH_RESULTS),
    "results": tasks._COMPLETE_MANY,
}


@pytest.mark.parametrize("name", sorted(HOT))
def test_a_hot_statement_is_short_enough_for_psycopg_to_keep_it_parsed(name: str) -> None:
    statement = HOT[name]
    assert len(statement.encode()) <= _queries.MAX_CACHED_STATEMENT_LENGTH
    placeholders = set(re.findall(r"%\((\w+)\)[sb]", statement))
    assert len(placeholders) <= _queries.MAX_CACHED_STATEMENT_PARAMS
