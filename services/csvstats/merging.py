"""Merge chunk summaries into the job's totals, exactly as one sequential pass would decide."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from services.csvstats.errors import BadRecord, MergeError, SumOverflow
from services.csvstats.model import INT64_MAX, INT64_MIN, ChunkPlan, Summary, Totals


def merge(plans: Sequence[ChunkPlan], summaries: Sequence[Summary]) -> Totals:
    """Combine one summary per planned chunk, in order, into the totals of the whole file.

    Raises SumOverflow if adding the values in file order overflows int64 before the first
    invalid record, else BadRecord for that record. Summaries after the first one with an
    error may be left out.
    """
    _check_plans(plans)
    if len(summaries) > len(plans):
        raise MergeError(f"{len(summaries)} summaries for {len(plans)} chunks", len(plans))
    first_error = None
    for plan, summary in zip(plans, summaries, strict=False):
        _check_summary(plan, summary, plans)
        if summary.error is not None and first_error is None:
            first_error = plan.index
    needed = len(plans) if first_error is None else first_error + 1
    if len(summaries) < needed:
        raise MergeError(f"chunk {len(summaries)}: summary missing", len(summaries))
    total, count, minimum, maximum = 0, 0, None, None
    for index, summary in enumerate(summaries[:needed]):
        # `total` is exact and in range here, so the running sum leaves int64 inside this
        # chunk exactly when one of its prefix extremes, shifted by total, does.
        if total + summary.min_prefix < INT64_MIN or total + summary.max_prefix > INT64_MAX:
            raise SumOverflow(index)
        if summary.error is not None:
            raise BadRecord(summary.error, index)
        total += summary.sum
        count += summary.count
        minimum = _lesser(minimum, summary.min)
        maximum = _greater(maximum, summary.max)
    return Totals(count=count, sum=total, min=minimum, max=maximum)


def partial_totals(summaries: Iterable[Summary]) -> Totals:
    """Add up some chunks' statistics as they are, without any overflow check."""
    total, count, minimum, maximum = 0, 0, None, None
    for summary in summaries:
        total += summary.sum
        count += summary.count
        minimum = _lesser(minimum, summary.min)
        maximum = _greater(maximum, summary.max)
    return Totals(count=count, sum=total, min=minimum, max=maximum)


def _check_plans(plans: Sequence[ChunkPlan]) -> None:
    if not plans:
        raise MergeError("there are no chunk plans", None)
    expected_start = 0
    for position, plan in enumerate(plans):
        if plan.index != position:
            raise MergeError(f"plan {position} is for chunk {plan.index}", position)
        if plan.record_start != expected_start or plan.record_end < plan.record_start:
            raise MergeError(
                f"chunk {position}: plan covers records {plan.record_start}-"
                f"{plan.record_end}, expected a range from {expected_start}",
                position,
            )
        expected_start = plan.record_end


def _check_summary(plan: ChunkPlan, summary: Summary, plans: Sequence[ChunkPlan]) -> None:
    index = plan.index
    if not isinstance(summary, Summary):
        raise MergeError(f"chunk {index}: not a Summary", index)
    if summary.digest != plan.sha256:
        elsewhere = [p.index for p in plans if p.sha256 == summary.digest]
        hint = f" (it is chunk {elsewhere[0]}'s)" if elsewhere else ""
        raise MergeError(
            f"chunk {index}: the summary's digest is not of the planned bytes{hint}", index
        )
    planned = plan.record_end - plan.record_start
    if summary.error is None:
        if summary.records != planned:
            raise MergeError(
                f"chunk {index}: summary covers {summary.records} records, the plan {planned}",
                index,
            )
    elif (
        summary.records >= planned
        or summary.error.record != plan.record_start + summary.records + 1
    ):
        raise MergeError(
            f"chunk {index}: invalid record {summary.error.record} is not the "
            f"one after the {summary.records} records summarised",
            index,
        )


def _lesser(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _greater(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)
