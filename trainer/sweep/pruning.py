"""The sweep's pruner: which trials stop before their budget (imported with Optuna, which the
sweep extra installs).

`median` and `hyperband` are Optuna's, fed the mean return on a common grid
(operant.trainer.sweep.objective). For `time_to_target` with one seed a trial, either also
stops a trial by the objective's own bound: a run still training after t seconds scores more
than t (it solves later, or never: then twice its seconds). So a trial whose training time
passes the value of the `keep`-th best complete trial (`keep`: the trials the confirmation
stage reruns, `confirm`, else 1) can no longer be one of the best `keep`, and stops, from the
`keep`-th complete trial on; the k-th best only improves as trials complete, so such a trial
never could have become one. That
is exact where a comparison of returns is a forecast: the search's best trials, and the best
few that the confirmation reruns, are the ones the sweep would find without it. And it stops
what the return comparison misses on a time grid: the trials that solved stop reporting when
they stop, so at later points a slow trial meets only the other slow ones, and a trial that
never solves trained its whole budget (docs/sweeps.md, "The time bound"). With several seeds
a trial's value aggregates them and one seed's time bounds nothing: the bound is not applied.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import TrialState

from operant.trainer.sweep.objective import REPORTS
from operant.trainer.sweep.spec import Sweep

STARTUP_TRIALS = 10
"""Complete trials before the median pruner prunes (its n_startup_trials)."""
WARMUP_S = 0.3
"""Seconds of training before the median pruner compares a trial's returns, on a time grid:
large batches make few updates in their first tenths of a second."""


class TimeBoundPruner(optuna.pruners.BasePruner):
    """`inner`'s decision, or: the trial's training time (its last grid point x `unit_s`) is
    past the `keep`-th best value of the study's complete trials (confirmations left out)."""

    def __init__(self, inner: optuna.pruners.BasePruner, unit_s: float, keep: int):
        self.inner, self.unit_s, self.keep = inner, unit_s, max(1, keep)

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        if self.inner.prune(study, trial):
            return True
        step = trial.last_step
        if step is None:
            return False
        values = sorted(
            complete.value
            for complete in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if complete.value is not None and "confirm_of" not in complete.user_attrs
        )
        # Exact from the keep-th complete trial on: no start-up trials to wait for.
        return len(values) >= self.keep and step * self.unit_s > values[self.keep - 1]


def make_pruner(sweep: Sweep) -> optuna.pruners.BasePruner:
    """The sweep's `pruner`, with the time bound where it applies."""
    # Warm-up: the first 2 points of a step budget's 20; on a time grid, WARMUP_S.
    unit_s = sweep.report_unit_s
    warmup = 2 if unit_s is None else max(1, round(WARMUP_S / unit_s))
    inner: Any
    if sweep.table.pruner == "median":
        inner = optuna.pruners.MedianPruner(n_startup_trials=STARTUP_TRIALS, n_warmup_steps=warmup)
    elif sweep.table.pruner == "hyperband":
        inner = optuna.pruners.HyperbandPruner(
            min_resource=2, max_resource=REPORTS if unit_s is None else "auto"
        )
    else:
        return optuna.pruners.NopPruner()
    table = sweep.table
    if unit_s is None or table.objective.metric != "time_to_target" or table.seeds != 1:
        return inner
    return TimeBoundPruner(inner, unit_s, keep=table.confirm)
