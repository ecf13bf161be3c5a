"""Every repository statement names the columns it returns.

psycopg prepares a statement once a connection has run it five times, and PostgreSQL then
refuses it (`cached plan must not change result type`) when a migration adds a column to a
table it returns with `*`, until that connection goes. Only what a statement itself returns
counts: a `*` inside parentheses (a CTE whose columns the statement names again, a subquery,
count(*), EXISTS) leaves the result type as it was (tests/integration/test_prepared_*.py). The
rule is stricter than PostgreSQL's: a `*` outside parentheses counts even where nothing is
returned (`INSERT ... SELECT * FROM unnest(...)`), so such inputs name their columns too.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest
from psycopg import sql

import repositories
from repositories import jobs, tasks

# What a comment or a quoted literal says is no column list.
_NOT_SQL = re.compile(r"--[^\n]*|'(?:[^']|'')*'")
# A `*` as a column list: the whole of a select list or RETURNING, an item of one, or rel.*.
_STAR = re.compile(r"\b(?:SELECT|RETURNING|DISTINCT)\s+\*|,\s*\*|\w\s*\.\s*\*", re.IGNORECASE)


def returned_stars(statement: str) -> list[str]:
    """The `*` column lists among what a statement returns (outside every parenthesis)."""
    outside = []
    depth = 0
    for char in _NOT_SQL.sub(" ", statement):
        if char == "(":
            depth += 1
            outside.append("(" if depth == 1 else "")
        elif char == ")":
            depth -= 1
            outside.append(")" if depth == 0 else "")
        elif depth == 0:
            outside.append(char)
    return _STAR.findall("".join(outside))


def _module_texts(module) -> dict[str, str]:
    """A module's module-level statements as they run, composed."""
    return {
        name: value if isinstance(value, str) else value.as_string()
        for name, value in vars(module).items()
        if isinstance(value, str | sql.Composable) and not name.startswith("__")
    }


def _literals(path: Path) -> list[str]:
    """The string literals of a module's source, docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if id(node) not in docstrings
    ]


def repository_statements() -> dict[str, str]:
    """Every statement of every repository module, by where it is: its composed module
    constants, and the literals written in place; a part composed into another statement (a
    CTE's body) is checked as part of that statement, where its parentheses are."""
    statements = {}
    for info in pkgutil.iter_modules(repositories.__path__):
        module = importlib.import_module(f"repositories.{info.name}")
        composed = _module_texts(module)
        found = {f"{info.name}.{name}": text for name, text in composed.items()}
        for number, text in enumerate(_literals(Path(module.__file__))):
            found[f"{info.name} literal {number}"] = text
        for where, text in found.items():
            if not any(text != whole and text in whole for whole in composed.values()):
                statements[where] = text
    return statements


def test_no_repository_statement_returns_star_columns() -> None:
    statements = repository_statements()
    assert statements["jobs._ADMIT"] == jobs._ADMIT
    assert statements["tasks._CLAIM"] == tasks._CLAIM
    starred = {
        where: stars for where, text in statements.items() if (stars := returned_stars(text))
    }
    assert starred == {}


@pytest.mark.parametrize(
    ("statement", "stars"),
    [
        ("SELECT * FROM jobs", 1),
        ("UPDATE jobs SET status = 'x' RETURNING *", 1),
        ("SELECT s.*, u.name FROM schedules s JOIN users u ON u.id = s.owner_id", 1),
        ("SELECT id, * FROM jobs", 1),
        ("INSERT INTO t (a) SELECT * FROM unnest(%(a)b::int[])", 1),
        ("SELECT count(*) AS n FROM jobs WHERE EXISTS (SELECT * FROM tasks)", 0),
        ("WITH j AS (UPDATE jobs SET x = 1 RETURNING *) SELECT j.id FROM j", 0),
        ("SELECT id FROM jobs -- not SELECT * FROM jobs", 0),
        ("SELECT format('SELECT * FROM %%s', id), 2 * 3 AS six FROM jobs", 0),
    ],
)
def test_only_a_star_outside_every_parenthesis_counts_as_returned(
    statement: str, stars: int
) -> None:
    assert len(returned_stars(statement)) == stars
