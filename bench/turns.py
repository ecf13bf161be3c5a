"""Timing in alternating turns: every turn kept, shown as median and range, never the best."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def take_turns(turns: int, actions: dict[str, Callable[[], object]]) -> dict[str, list[float]]:
    """Run the actions one after another, `turns` times over; name -> wall seconds per turn.

    Taking turns makes a shared machine that speeds up or slows down move every side alike.
    """
    seconds: dict[str, list[float]] = {name: [] for name in actions}
    for _ in range(turns):
        for name, action in actions.items():
            started = time.perf_counter()
            action()
            seconds[name].append(time.perf_counter() - started)
    return seconds


def ratios(numerator: list[float], denominator: list[float]) -> list[float]:
    """Turn by turn ratios of two sides timed in the same turns."""
    return [a / b for a, b in zip(numerator, denominator, strict=True)]


def spread(values: list[float], unit: str = "x", digits: int = 2) -> str:
    """'median (min-max)' of the values, every one of which was measured."""
    median, low, high = statistics.median(values), min(values), max(values)
    return f"{median:.{digits}f}{unit} ({low:.{digits}f}-{high:.{digits}f})"
