"""The SDK reference page's objects keep the house style: a one-line docstring each."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import worker_cli

REFERENCE = Path(__file__).parents[2] / "docs" / "reference" / "sdk.md"
RENDERED = re.findall(r"^::: worker_cli\.(\w+)$", REFERENCE.read_text(), re.MULTILINE)


def documented(name: str):
    """The object the reference page renders, then each of its public members defined here."""
    obj = getattr(worker_cli, name)
    yield name, obj
    for member, value in vars(obj).items():
        if not member.startswith("_"):
            yield f"{name}.{member}", getattr(value, "fget", value)


@pytest.mark.parametrize("name", RENDERED)
def test_every_object_on_the_sdk_reference_page_has_one_line_docstrings(name):
    long = [
        where
        for where, obj in documented(name)
        if callable(obj) and "\n" in (inspect.getdoc(obj) or "").strip()
    ]
    assert long == []
