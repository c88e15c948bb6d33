"""Sweep directories and their summary file: what readers without Optuna know of a sweep.

`operant sweep` (operant.trainer.sweep) keeps each sweep under `RUNS_ROOT/sweeps/NAME/`: its
trials' run directories (ordinary runs), the Optuna study (`study.db` where the storage is the
default SQLite file), the config the trials train (`config.toml`), the best one found
(`best.toml`) and `sweep.json`, the leaderboard as a `SweepSummary`, rewritten whole
(operant.shared.atomic) after every trial that ends. `operant runs` and the monitor read
that file, never the study: they import neither Optuna nor torch, and never write into a
sweep directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from operant.shared.runs import LATEST_NAME, RunNotFoundError, resolve_run

SWEEPS_DIR = "sweeps"
SUMMARY_FILE = "sweep.json"
STUDY_FILE = "study.db"
CONFIG_FILE = "config.toml"
BEST_FILE = "best.toml"
"""The best trial's config as a file operant-train reads (the confirmed best, once any)."""


class TrialRow(msgspec.Struct, kw_only=True):
    """One trial of a sweep."""

    number: int
    state: str
    """complete, pruned, failed, running, waiting, or interrupted (stopped with a checkpoint,
    re-queued by the next `operant sweep` of the same file)."""
    value: float | None = None
    """The objective, aggregated over the trial's seeds (complete trials)."""
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    """Config path -> value."""
    run_ids: list[str] = msgspec.field(default_factory=list)
    """The trial's runs (one per seed), directories of the sweep directory."""
    reason: str = ""
    """Why a trial failed, was pruned or was interrupted."""
    confirm_of: int | None = None
    """A confirmation: the trial whose config this one re-ran on fresh seeds (its runs are
    that trial's run id with other seeds). Not counted among the sweep's trials."""
    confirmed: float | None = None
    """A trial that was confirmed: its confirmation's value (the objective aggregated over
    the fresh seeds' runs)."""


class SweepSummary(msgspec.Struct, kw_only=True):
    """A sweep's leaderboard; `operant sweep show NAME --json` prints one."""

    name: str
    metric: str
    direction: str
    n_trials: int
    storage: str
    """The study's storage, without a password."""
    complete: int = 0
    pruned: int = 0
    failed: int = 0
    running: int = 0
    confirm: int = 0
    """Trials the sweep confirms (sweep.confirm), each on `confirm_seeds` fresh seeds."""
    confirm_seeds: int = 0
    confirmed: int = 0
    """Confirmations complete. Once there is one, `best` is the confirmed trial with the
    best confirmed value (its `confirmed`), else the trial with the best value."""
    confirm_stopped: int = 0
    """Confirmations stopped (pruned) once their value could no longer beat the best
    confirmed one (operant.trainer.sweep.pruning.TimeBound)."""
    best: TrialRow | None = None
    trials: list[TrialRow] = msgspec.field(default_factory=list)
    updated_at: float = 0.0
    """Unix seconds."""


def sweeps_root(runs_root: Path) -> Path:
    return runs_root / SWEEPS_DIR


def sweep_dir(runs_root: Path, name: str) -> Path:
    return sweeps_root(runs_root) / name


def list_sweep_dirs(runs_root: Path) -> list[Path]:
    """The sweep directories under a runs root, by name."""
    root = sweeps_root(runs_root)
    try:
        return sorted(path for path in root.iterdir() if path.is_dir())
    except OSError:
        return []


def resolve_newest(runs_root: Path, run: str | None) -> Path:
    """`resolve_run`, where the latest run (`run` None or 'latest') is the one started last,
    a sweep's trial included: a sweep's trials are the `latest` of its own directory, not of
    the runs root, so that `operant eval latest` and `operant-train --resume latest` keep
    naming the root's own runs. The monitor watches this one: a sweep's live trial where it
    started after the root's newest run, or where the root has none."""
    if run is not None and run != LATEST_NAME:
        return resolve_run(runs_root, run)
    newest = max(
        ((os.lstat(link).st_mtime_ns, directory) for directory in list_sweep_dirs(runs_root)
         if os.path.islink(link := directory / LATEST_NAME)),
        default=None,
    )  # fmt: skip
    try:
        own = resolve_run(runs_root, None)
    except RunNotFoundError:
        if newest is None:
            raise
        return resolve_run(newest[1], None)
    if newest is not None and newest[0] > os.lstat(runs_root / LATEST_NAME).st_mtime_ns:
        try:
            return resolve_run(newest[1], None)
        except RunNotFoundError:  # its trial's directory was removed: the root's own run
            pass
    return own


def read_summary(directory: Path) -> SweepSummary | None:
    """A sweep directory's summary; None where it has none yet or it cannot be read."""
    try:
        return msgspec.json.decode((directory / SUMMARY_FILE).read_bytes(), type=SweepSummary)
    except (OSError, msgspec.DecodeError):
        return None


def stopped_words(summary: SweepSummary) -> str:
    """What follows the count of confirmations where some were stopped; else ''."""
    if not summary.confirm_stopped:
        return ""
    return f" ({summary.confirm_stopped} stopped: they could not beat the best)"


def describe(summary: SweepSummary, running: int | None = None) -> str:
    """A sweep in one line: its objective, its trials' states and its best value. `running`:
    how many of its trials train now, where the reader knows (from their metrics files: the
    summary's own count is as of the last trial that ended)."""
    line = (
        f"sweep {summary.name}: {summary.metric} ({summary.direction}); "
        f"{summary.complete} complete, {summary.pruned} pruned, {summary.failed} failed of "
        f"{summary.n_trials}"
    )
    if running:
        line += f", {running} running"
    best = summary.best
    if best is not None and best.value is not None:
        params = ", ".join(f"{path}={_short(value)}" for path, value in best.params.items())
        if best.confirmed is not None:
            line += f"; best {best.confirmed:.4g} on {summary.confirm_seeds} fresh seeds"
        else:
            line += f"; best {best.value:.4g}"
        line += f" (trial {best.number}: {params})"
    return line


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
