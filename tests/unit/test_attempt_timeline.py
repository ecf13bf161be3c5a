"""The job page's timeline: every attempt on its worker's lane, named as the page names it."""

from __future__ import annotations

import uuid
from dataclasses import fields
from datetime import UTC, datetime, timedelta

from app.attempt_timeline import LABEL_WIDTH, MIN_BAR_WIDTH, build_timeline
from repositories.attempts import Attempt
from repositories.tasks import Task
from services.chunks import ChunkView

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """A moment this many seconds after the job was created."""
    return T0 + timedelta(seconds=seconds)


def chunk(index: int, *attempts: tuple[str, float, float | None, str | None]) -> ChunkView:
    """A chunk with attempts given as (worker, leased at, finished at, outcome)."""
    task = Task(**{f.name: None for f in fields(Task)} | {"chunk_index": index})
    return ChunkView(
        task=task,
        attempts=[
            Attempt(
                id=uuid.uuid4(),
                task_id=uuid.uuid4(),
                attempt=n,
                worker_id=worker,
                trace_id=f"trace-{index}-{n}",
                leased_at=at(start),
                finished_at=at(end) if end is not None else None,
                outcome=outcome,
                error_code="lease_expired" if outcome == "lease_expired" else None,
                error_message=None,
            )
            for n, (worker, start, end, outcome) in enumerate(attempts, start=1)
        ],
        summary=None,
    )


def test_overlapping_attempts_of_one_worker_get_a_slot_each():
    chunks = [
        chunk(0, ("w1", 0, 2, "completed")),
        chunk(1, ("w1", 1, 3, "completed")),
        chunk(2, ("w1", 2.5, 4, "completed")),
        chunk(3, ("w2", 0, 1, "completed")),
    ]

    timeline = build_timeline(T0, chunks, now=at(5))

    assert [lane.label for lane in timeline.lanes] == ["w1 slot 1", "w1 slot 2", "w2"]
    rows = {b.chunk_index: b.y for b in timeline.bars}
    assert rows[0] == rows[2] != rows[1]


def test_each_stored_outcome_is_shown_by_the_name_the_page_uses():
    chunks = [
        chunk(0, ("killed", 0, 4, "lease_expired"), ("rescuer", 4, 5, "completed")),
        chunk(1, ("flaky", 0, 1, "retried"), ("flaky", 1, None, None)),
        chunk(2, ("w", 0, 1, "cancelled")),
    ]

    timeline = build_timeline(T0, chunks, now=at(6))

    assert [(b.chunk_index, b.worker_id, b.state) for b in timeline.bars] == [
        (0, "killed", "expired"),
        (1, "flaky", "failed"),
        (2, "w", "cancelled"),
        (1, "flaky", "running"),
        (0, "rescuer", "completed"),
    ]
    assert {b.trace_id for b in timeline.bars if b.chunk_index == 0} == {"trace-0-1", "trace-0-2"}


def test_a_running_attempt_reaches_now_at_the_right_edge():
    timeline = build_timeline(T0, [chunk(0, ("w", 1, None, None))], now=at(4))

    bar = timeline.bars[0]
    assert bar.x + bar.width == timeline.width - 20
    assert bar.x == LABEL_WIDTH + (timeline.width - 20 - LABEL_WIDTH) / 4


def test_a_very_short_attempt_is_still_drawn_wide_enough_to_see():
    chunks = [chunk(0, ("w", 0, 0.001, "completed")), chunk(1, ("w", 0.001, 60, "completed"))]

    timeline = build_timeline(T0, chunks, now=at(60))

    assert min(b.width for b in timeline.bars) == MIN_BAR_WIDTH
