"""Hand-written, parameterized SQL; each function takes the caller's connection."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, TypeVar

T = TypeVar("T")


def from_row(cls: type[T], row: dict[str, Any]) -> T:
    """Build a dataclass from a dict row, ignoring columns the dataclass does not name."""
    return cls(**{f.name: row[f.name] for f in fields(cls) if f.name in row})
