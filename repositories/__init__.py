"""Hand-written, parameterized SQL; each function takes the caller's connection.

A list goes as a binary parameter (`%(ids)b`): psycopg writes a text array element by
element in Python, escaping each, which cost 4 ms of a 100-result batch's events alone.

The statements of an admission, a heartbeat batch and a result batch are prepared on each
connection's first use of them (`prepare=True`): the pool hands its connections out in turn, so
psycopg's own rule (prepare on a connection's fifth use) seldom fired, and PostgreSQL planned
them afresh each time, about half of an admission's database CPU. The claim is prepared too,
and told to keep its generic plan (repositories/tasks.py says why).

Every statement names the columns it returns (`columns`) rather than `*`, cold ones too
(tests/unit/test_named_columns.py): psycopg prepares any statement a connection has run five
times, and PostgreSQL refuses a prepared statement whose result type would change, so a
migration adding a column, applied while coordinators run, would fail it on every connection
that prepared it.
"""

from __future__ import annotations

from dataclasses import fields
from functools import cache
from typing import Any, TypeVar

from psycopg import sql

T = TypeVar("T")


def from_row(cls: type[T], row: dict[str, Any]) -> T:
    """Build a dataclass from a dict row, ignoring columns the dataclass does not name."""
    return cls(**{name: row[name] for name in _field_names(cls) if name in row})


def columns(cls: type, table: str | None = None, *, computed: tuple[str, ...] = ()) -> sql.Composed:
    """The columns a row dataclass names, as a select list (qualified by `table` if given),
    but the `computed` ones, which a statement works out rather than reads."""
    return sql.SQL(", ").join(
        sql.Identifier(table, name) if table else sql.Identifier(name)
        for name in _field_names(cls)
        if name not in computed
    )


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    # dataclasses.fields() builds its tuple anew on every call; rows come by the thousand.
    return tuple(f.name for f in fields(cls))
