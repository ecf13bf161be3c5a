"""Lay a job's attempts out as bars on worker lanes, for the job page's server-side SVG."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from repositories.attempts import Attempt
from services.chunks import ChunkView

WIDTH = 960
LABEL_WIDTH = 170
LANE_HEIGHT = 26
AXIS_HEIGHT = 30
# A bar is never drawn thinner than this, so a 5 ms attempt can still be seen and hovered.
MIN_BAR_WIDTH = 4.0

# What each stored outcome is called on the page (a still-open attempt has none).
OUTCOME_NAMES = {
    None: "running",
    "completed": "completed",
    "lease_expired": "expired",
    "failed": "failed",
    "retried": "failed",
    "cancelled": "cancelled",
}


@dataclass(frozen=True)
class Bar:
    """One attempt: where it is drawn and what it says."""

    x: float
    y: float
    width: float
    chunk_index: int
    attempt: int
    worker_id: str
    state: str
    trace_id: str
    started_at: datetime
    finished_at: datetime | None
    error: str | None


@dataclass(frozen=True)
class Lane:
    """One row of the chart: a worker's slot."""

    label: str
    y: float


@dataclass(frozen=True)
class Tick:
    """A mark on the time axis."""

    x: float
    label: str


@dataclass(frozen=True)
class Timeline:
    """Everything the template draws."""

    width: int
    height: int
    label_width: int
    lanes: list[Lane]
    bars: list[Bar]
    ticks: list[Tick]
    axis_y: float


def build_timeline(started: datetime, chunks: Sequence[ChunkView], now: datetime) -> Timeline:
    """Place every attempt on its worker's first free slot, on a time axis from `started`."""
    attempts = sorted(
        ((c.task.chunk_index, a) for c in chunks for a in c.attempts),
        key=lambda pair: (pair[1].leased_at, pair[0]),
    )
    end = max([now if a.finished_at is None else a.finished_at for _, a in attempts] + [started])
    span = max((end - started).total_seconds(), 0.001)
    scale = (WIDTH - LABEL_WIDTH - 20) / span

    # Overlapping attempts of one worker (capacity > 1) go on separate slots of its lane.
    slots: dict[str, list[datetime]] = {}
    placed: list[tuple[str, int, int, Attempt]] = []
    for chunk_index, a in attempts:
        finished = a.finished_at or now
        ends = slots.setdefault(a.worker_id, [])
        slot = next((i for i, free_at in enumerate(ends) if free_at <= a.leased_at), len(ends))
        if slot == len(ends):
            ends.append(finished)
        else:
            ends[slot] = finished
        placed.append((a.worker_id, slot, chunk_index, a))

    lane_rows: dict[tuple[str, int], int] = {}
    lanes: list[Lane] = []
    for worker_id in sorted(slots):
        for slot in range(len(slots[worker_id])):
            lane_rows[(worker_id, slot)] = len(lanes)
            label = worker_id if len(slots[worker_id]) == 1 else f"{worker_id} slot {slot + 1}"
            lanes.append(Lane(label=label, y=len(lanes) * LANE_HEIGHT))

    bars = []
    for worker_id, slot, chunk_index, a in placed:
        x0 = LABEL_WIDTH + (a.leased_at - started).total_seconds() * scale
        x1 = LABEL_WIDTH + ((a.finished_at or now) - started).total_seconds() * scale
        bars.append(
            Bar(
                x=round(x0, 1),
                y=lane_rows[(worker_id, slot)] * LANE_HEIGHT + 3,
                width=round(max(x1 - x0, MIN_BAR_WIDTH), 1),
                chunk_index=chunk_index,
                attempt=a.attempt,
                worker_id=worker_id,
                state=OUTCOME_NAMES.get(a.outcome, a.outcome),
                trace_id=a.trace_id,
                started_at=a.leased_at,
                finished_at=a.finished_at,
                error=a.error_code,
            )
        )
    axis_y = len(lanes) * LANE_HEIGHT + 4
    # Enough decimals that five ticks over a sub-second job still read differently.
    decimals = 2 if span < 2 else 1 if span < 20 else 0
    ticks = [
        Tick(x=round(LABEL_WIDTH + span * i / 4 * scale, 1), label=f"{span * i / 4:.{decimals}f} s")
        for i in range(5)
    ]
    return Timeline(
        width=WIDTH,
        height=int(axis_y + AXIS_HEIGHT),
        label_width=LABEL_WIDTH,
        lanes=lanes,
        bars=sorted(bars, key=lambda b: (b.started_at, b.chunk_index)),
        ticks=ticks,
        axis_y=axis_y,
    )
