"""A hot statement's rows become the same frozen Task as its constructor builds, with the
columns after the Task's passed through."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime

import pytest

from repositories.tasks import Task, _task_first

NOW = datetime(2026, 12, 8, tzinfo=UTC)


def task_values() -> list:
    """A leased task's 31 columns, in the order columns(Task) selects them."""
    return [
        *(uuid.uuid4(), uuid.uuid4(), 3, "noop", 5, "/in", "ab" * 32, {"k": 1}, "leased", 2, 3),
        *(0, 1, "worker-1", NOW, NOW, {"at": 4}, None, None, None, None, None, None),
        *(NOW, NOW, None, 7, None, 60, NOW, '{"x": 1}'),
    ]


def test_a_row_builds_the_task_its_constructor_would_and_passes_the_rest_through():
    values = task_values()
    token, attempt = "secret", uuid.uuid4()

    task, *rest = _task_first(None)((*values, token, attempt))

    assert task == Task(*values)
    assert dataclasses.astuple(task) == tuple(values)
    assert rest == [token, attempt]


def test_a_task_built_from_a_row_stays_frozen():
    task, *_ = _task_first(None)(task_values())

    with pytest.raises(dataclasses.FrozenInstanceError):
        task.status = "succeeded"
    assert task.blocked is False
