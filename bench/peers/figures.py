"""The peer bench's pure figures: rates, ratios to the same turn's pgbench, medians, the table."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from bench.cpu import Usage


@dataclass(frozen=True)
class Drain:
    """One system's drain of `tasks` no-op tasks in one turn (seconds None: it timed out)."""

    system: str
    turn: int
    tasks: int
    seconds: float | None
    submit_seconds: float | None = None
    cpu_us_per_task: float | None = None
    # CPU seconds the machine and the database server used from the release to the last task.
    usage: Usage | None = None

    @property
    def tasks_per_s(self) -> float | None:
        """Tasks drained per second, or None when the drain timed out."""
        return self.tasks / self.seconds if self.seconds else None

    @property
    def per_task(self) -> Usage | None:
        """The machine's and the database server's CPU microseconds per task, where measured."""
        return None if self.usage is None or self.seconds is None else self.usage.per(self.tasks)


@dataclass(frozen=True)
class Row:
    """A system in the final table: its name, the pgbench client count it is set beside, and
    whether a finished task survives a crash of its server."""

    system: str
    clients: int
    durable: str


def ratio(tasks_per_s: float | None, pgbench_tps: float | None) -> float | None:
    """tasks/s over the same turn's pgbench TPS; None when either is missing."""
    if tasks_per_s is None or not pgbench_tps:
        return None
    return tasks_per_s / pgbench_tps


def spread(values: list[float | None]) -> tuple[float, float, float] | None:
    """(median, lowest, highest) of the values present; None when none is."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return statistics.median(present), min(present), max(present)


def turn_ratios(drains: list[Drain], pgbench: dict[tuple[int, int], float], clients: int) -> list:
    """Each drain's ratio to the pgbench TPS of its own turn at `clients` clients."""
    return [ratio(d.tasks_per_s, pgbench.get((d.turn, clients))) for d in drains]


def turn_line(drain: Drain, pgbench_tps: float | None) -> str:
    """One turn of one system, as printed while the bench runs."""
    if drain.seconds is None:
        return f"turn {drain.turn}  {drain.system:<34} timed out"
    line = (
        f"turn {drain.turn}  {drain.system:<34} {drain.seconds:7.2f} s "
        f"{drain.tasks_per_s:8.0f} tasks/s"
    )
    if drain.submit_seconds is not None:
        line += f"  (submitted in {drain.submit_seconds:.2f} s)"
    share = ratio(drain.tasks_per_s, pgbench_tps)
    if share is not None:
        line += f"  {share:.2f}x pgbench ({pgbench_tps:.0f} TPS)"
    if drain.cpu_us_per_task is not None:
        line += f"  coordinator CPU {drain.cpu_us_per_task:.0f} us/task"
    if drain.per_task is not None:
        line += f"  {usage_text(drain.per_task, 'task')}"
    return line


def usage_text(usage: Usage, unit: str) -> str:
    """The machine's CPU per unit of work, and the database server's CPU and WAL where measured."""
    text = f"machine CPU {usage.machine:.0f} us/{unit}"
    if usage.database is not None:
        text += f", database {usage.database:.0f} us"
    if usage.wal is not None:
        text += f", WAL {usage.wal:.0f} B"
    return text


def _range(values: tuple[float, float, float] | None, digits: int) -> str:
    if values is None:
        return "-"
    median, low, high = values
    return f"{median:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def table(
    rows: list[Row],
    drains: list[Drain],
    pgbench: dict[tuple[int, int], float],
    pgbench_usage: dict[tuple[int, int], Usage] | None = None,
) -> list[str]:
    """The final markdown table: per system the median (range) of its ratio to the same turn's
    pgbench, of its tasks/s, of the CPU per task where measured (the coordinator's, the
    machine's, the database server's) and of the WAL written per task; pgbench's per
    transaction."""
    lines = [
        "| system | drain / pgbench, median (range) | tasks/s | coordinator CPU us/task "
        "| machine CPU us/task | database CPU us/task | WAL B/task | durable? |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        mine = [d for d in drains if d.system == row.system]
        ratios = spread(turn_ratios(mine, pgbench, row.clients))
        rates = spread([d.tasks_per_s for d in mine])
        cpu = spread([d.cpu_us_per_task for d in mine])
        ran = sum(1 for d in mine if d.seconds is not None)
        ratio_text = f"{_range(ratios, 2)} of pgbench -c {row.clients}, {ran} turns"
        used = _usage_ranges([d.per_task for d in mine])
        lines.append(
            f"| {row.system} | {ratio_text} | {_range(rates, 0)} | {_range(cpu, 0)} "
            f"| {used} | {row.durable} |"
        )
    for clients in sorted({c for _, c in pgbench}):
        tps = spread([tps for (_, c), tps in pgbench.items() if c == clients])
        mine = [u for (_, c), u in (pgbench_usage or {}).items() if c == clients]
        lines.append(
            f"| pgbench -N -c {clients} | 1.00 | {_range(tps, 0)} TPS | - "
            f"| {_usage_ranges(mine)} | yes |"
        )
    return lines


def _usage_ranges(usages: list[Usage | None]) -> str:
    """The machine's, the database's and the WAL's columns: median (range) of each."""
    present = [u for u in usages if u is not None]
    columns = [
        spread([u.machine for u in present]),
        spread([u.database for u in present]),
        spread([u.wal for u in present]),
    ]
    return " | ".join(_range(column, 0) for column in columns)
