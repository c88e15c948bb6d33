"""A trial's objective from its runs' update records, and what the pruner is fed as they come.

Pure functions over `UpdateRecord`s (progress.jsonl's lines): no Optuna, no files.

The pruner compares trials at the same step, and trials sweep batch sizes, so a run's
records are placed on a common grid: for a return objective REPORTS points, each 1/REPORTS of
the step budget (a run that stops early at its target keeps its last value for the rest of
the grid); for time_to_target one point every `unit_s` seconds of training, so that trials are
compared at equal training time, which is what that objective ranks (on a grid of steps, a
small batch's many updates per step looked better than a large batch's fewer, faster ones:
the pruned CartPole sweep drifted to slow configs, docs/sweeps.md). The value reported at a
point is the mean return of the last 100 episodes, negated when the study minimizes, so that
"better" has the study's direction.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

from operant.shared.record import UpdateRecord

REPORTS = 20
UNSOLVED_FACTOR = 2.0
"""time_to_target of a run that never reached its target: this many times the seconds it
trained, so it ranks below every run that solved within its budget's time."""


MAX_TIME_POINTS = 100_000
"""A time grid's last point: a run reports no further (at 0.1 s a point, 2.8 hours)."""


def grid_point(record: UpdateRecord, budget_steps: int, unit_s: float | None = None) -> int:
    """The last grid point a run has passed at `record`: of REPORTS over the step budget, or
    with `unit_s`, one every `unit_s` seconds of training."""
    if unit_s is not None:
        return min(MAX_TIME_POINTS, int(record.elapsed_s / unit_s + 1e-9))  # 0.3 / 0.1 < 3
    return min(REPORTS, record.global_step * REPORTS // max(1, budget_steps))


def report_value(record: UpdateRecord, direction: str) -> float | None:
    """What the pruner sees of one update; None before any episode finished."""
    value = record.episode_return_mean
    if value is None or not math.isfinite(value):
        return None
    return -value if direction == "minimize" else value


def reports(
    records: Iterable[UpdateRecord],
    budget_steps: int,
    direction: str,
    after: int = 0,
    unit_s: float | None = None,
) -> list[tuple[int, float]]:
    """(grid point, value) for every point past `after` that `records` reach."""
    out: list[tuple[int, float]] = []
    last = after
    for record in records:
        point = grid_point(record, budget_steps, unit_s)
        value = report_value(record, direction)
        if value is None or point <= last:
            continue
        out += [(step, value) for step in range(last + 1, point + 1)]
        last = point
    return out


def run_value(records: Sequence[UpdateRecord], metric: str, budget_steps: int) -> float | None:
    """One run's objective; None where it has no value (no episode finished)."""
    if not records:
        return None
    if metric == "time_to_target":
        for record in records:
            if record.solved:
                return record.elapsed_s
        return UNSOLVED_FACTOR * records[-1].elapsed_s
    if metric == "final_return":
        value = records[-1].episode_return_mean
        return value if value is not None and math.isfinite(value) else None
    return return_auc(records, budget_steps)


def return_auc(records: Sequence[UpdateRecord], budget_steps: int) -> float | None:
    """The mean return over the budget: each update's mean return weighted by the steps it
    covers (0 before the first episode's end), the last one held to the budget's end."""
    area, previous, last = 0.0, 0, 0.0
    for record in records:
        value = record.episode_return_mean
        last = value if value is not None and math.isfinite(value) else last
        step = min(record.global_step, budget_steps)
        area += last * (step - previous)
        previous = step
    if previous == 0:
        return None
    area += last * max(0, budget_steps - previous)
    return area / budget_steps


def finished(records: Sequence[UpdateRecord], budget_steps: int) -> bool:
    """Whether a run's records end it: its target reached, or its budget spent."""
    return bool(records) and (bool(records[-1].solved) or records[-1].global_step >= budget_steps)


def aggregate(values: Sequence[float], how: str) -> float:
    return statistics.median(values) if how == "median" else statistics.fmean(values)
