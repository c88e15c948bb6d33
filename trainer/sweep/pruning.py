"""The sweep's pruning: which trials stop before their budget, and how little the sweep's own
process spends deciding it (imported with Optuna, which the sweep extra installs).

`median` and `hyperband` are Optuna's pruners, fed the mean return on a common grid
(operant.trainer.sweep.objective). A report is a write to the study's storage and a pruner's
decision reads it back, each milliseconds of the sweep process's CPU on the cores the trials
train on. Reported at every grid point (every 0.05 s of each trial's training, for the
shipped CartPole sweep), the sweep's process took about half a core, and the trials of the
pruned sweep trained 1.04-1.47x slower than the same trials unpruned (docs/sweeps.md,
"The sweep's own CPU"). So the sweep reports only the points where its pruner decides
(`decides`): Hyperband's rungs, the median pruner's every point from its warm-up on, none
without a pruner; and a trial's last point when it ends, which Hyperband reads its budget
from and the sampler ranks pruned trials by.

The time bound (`TimeBound`, for `time_to_target` with one seed a trial): a run still training
after t seconds scores more than t (it solves later, or never: then twice its seconds). So a
trial whose training time passes the value of the `keep`-th best complete trial (`keep`: the
trials the confirmation stage reruns, `confirm`, else 1) can no longer be one of the best
`keep`, and stops, from the `keep`-th complete trial on; the k-th best only improves as
trials complete, so such a trial never could have become one. That is exact where a
comparison of returns is a forecast: the search's best trials, and the best few that the
confirmation reruns, are the ones the sweep would find without it. And it stops what the
return comparison misses on a time grid: the trials that solved stop reporting when they
stop, so at later points a slow trial meets only the other slow ones, and a trial that never
solves trained its whole budget (docs/sweeps.md, "The time bound"). It is checked in the
sweep's process at every grid point against the complete trials' values, read when a trial
of its own ends and, where other processes share the study, every REFRESH_S: no storage
round trip a point. With several seeds a trial's value aggregates them and one seed's time
bounds nothing: the bound is not applied. The confirmation stage is bounded the same way: a
confirmation whose runs already put its median (or mean) above the best complete
confirmation's can no longer be the sweep's best, and stops (`confirmation_lost`).
"""

from __future__ import annotations

from collections.abc import Callable

import optuna
from optuna.trial import TrialState

from operant.trainer.sweep.objective import REPORTS
from operant.trainer.sweep.spec import Sweep

STARTUP_TRIALS = 10
"""Complete trials before the median pruner prunes (its n_startup_trials)."""
WARMUP_S = 0.3
"""Seconds of training before the median pruner compares a trial's returns, on a time grid:
large batches make few updates in their first tenths of a second."""
HYPERBAND_MIN_POINTS = 2
"""Hyperband's first rung, in grid points (0.1 s on the shipped CartPole sweep's grid)."""
REDUCTION = 2
"""Each rung is this many times the last, and keeps 1/REDUCTION of the trials that reach
it. Optuna's 3 (rungs at 0.1, 0.3, 0.9 s) let trials that the next rung would stop train to
0.3 s, a tuned CartPole run's whole training; with 2 (0.1, 0.2, 0.4, 0.8 s) the pruned
CartPole sweeps trained fewer steps and found configs as good (docs/sweeps.md, Measured)."""
REFRESH_S = 1.0
"""How often the time bound reads the study's complete trials while other processes may be
completing trials of it (a shared server)."""


class TimeBound:
    """The training time past which a trial can no longer be one of the best `keep` complete
    trials (confirmations left out), as of the last `refresh`."""

    def __init__(self, unit_s: float, keep: int):
        self.unit_s, self.keep = unit_s, max(1, keep)
        self.values: list[float] = []
        """The complete trials' values, best first (confirmations left out)."""
        self.confirmed_best: float | None = None
        """The best complete confirmation's value."""

    def refresh(self, study: optuna.Study) -> None:
        done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        values = [(t.value, "confirm_of" in t.user_attrs) for t in done if t.value is not None]
        self.values = sorted(value for value, confirms in values if not confirms)
        confirmed = [value for value, confirms in values if confirms]
        self.confirmed_best = min(confirmed) if confirmed else None

    @property
    def limit_s(self) -> float | None:
        """The `keep`-th best value; None until `keep` trials are complete (from then on the
        bound is exact: no start-up trials to wait for)."""
        return self.values[self.keep - 1] if len(self.values) >= self.keep else None

    def passed(self, point: int) -> bool:
        """Whether a trial that trained `point` grid points is past the bound."""
        limit = self.limit_s
        return limit is not None and point * self.unit_s > limit

    def confirmation_lost(
        self, values: list[float], running_s: float, seeds: int, aggregate: str
    ) -> bool:
        """Whether a confirmation can no longer beat the best complete one: its finished
        runs' `values` and its running run's `running_s` seconds (its value will be more)
        already put its aggregate over `seeds` runs above that best. Exact, as the trials'
        bound is: the sweep's best, the best confirmed trial, is the same with it."""
        best = self.confirmed_best
        if best is None:
            return False
        if aggregate == "mean":  # the runs not started yet score more than 0
            return sum(values) + running_s > seeds * best
        above = sum(value > best for value in values) + (running_s > best)
        return above >= seeds // 2 + 1  # the median is then one of them, or their mean


def make_pruner(sweep: Sweep) -> optuna.pruners.BasePruner:
    """The sweep's `pruner`, as Optuna's (the time bound is the driver's: `time_bound`)."""
    unit_s = sweep.report_unit_s
    if sweep.table.pruner == "median":
        return optuna.pruners.MedianPruner(
            n_startup_trials=STARTUP_TRIALS, n_warmup_steps=_warmup(unit_s)
        )
    if sweep.table.pruner == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=HYPERBAND_MIN_POINTS,
            max_resource=REPORTS if unit_s is None else "auto",
            reduction_factor=REDUCTION,
        )
    return optuna.pruners.NopPruner()


def time_bound(sweep: Sweep) -> TimeBound | None:
    """The sweep's time bound, where it applies: a pruner, `time_to_target`, one seed."""
    table = sweep.table
    unit_s = sweep.report_unit_s
    if table.pruner == "none" or unit_s is None or table.seeds != 1:
        return None
    return TimeBound(unit_s, keep=table.confirm)


def decides(sweep: Sweep) -> Callable[[int], bool]:
    """Whether the sweep's pruner decides at a grid point (the points it is fed)."""
    if sweep.table.pruner == "median":
        warmup = _warmup(sweep.report_unit_s)
        return lambda point: point >= warmup
    if sweep.table.pruner == "hyperband":
        return _is_rung
    return lambda point: False


def _is_rung(point: int) -> bool:
    """A rung of any of Hyperband's brackets: HYPERBAND_MIN_POINTS x REDUCTION^k (bracket b's
    successive halving starts at k = b)."""
    rung = HYPERBAND_MIN_POINTS
    while rung < point:
        rung *= REDUCTION
    return rung == point


def _warmup(unit_s: float | None) -> int:
    # The first 2 points of a step budget's 20; on a time grid, WARMUP_S.
    return 2 if unit_s is None else max(1, round(WARMUP_S / unit_s))
