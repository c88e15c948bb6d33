"""`operant sweep show NAME`: a sweep's leaderboard as a table or JSON, and its plots.

The leaderboard comes from the study itself where Optuna can open it (the SQLite file in the
sweep directory, or `--storage`), else from the summary the sweep keeps beside its runs
(operant.shared.sweeps). `--plots DIR` (default: the sweep directory) gets Optuna's
optimisation history and parameter importances as PNGs, drawn by matplotlib.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from operant.shared.cli_parser import EXIT_USAGE, OneLineParser
from operant.shared.sweeps import (
    STUDY_FILE,
    SweepSummary,
    list_sweep_dirs,
    read_summary,
    stopped_words,
    sweep_dir,
)

PROG = "operant sweep show"
PLOTS = ("history.png", "importance.png")


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description="A sweep's leaderboard, and its plots.")
    parser.add_argument("name", metavar="NAME", help="the sweep's name (sweep.name)")
    parser.add_argument("--runs-dir", metavar="DIR", help="runs root (as operant-train's)")
    parser.add_argument("--storage", metavar="URL", help="the study's storage, if not SQLite")
    parser.add_argument("--json", action="store_true", help="print the leaderboard as JSON")
    parser.add_argument(
        "--plots", metavar="DIR", help="where the PNGs go (default: the sweep directory)"
    )
    parser.add_argument("--no-plots", action="store_true", help="write no PNG")
    parser.add_argument("--top", type=int, default=10, metavar="N", help="rows in the table")
    return parser


def main(argv: list[str]) -> int:
    from operant.shared import runs

    args = _parser().parse_args(argv)
    root = runs.runs_root(args.runs_dir)
    directory = sweep_dir(root, args.name).absolute()
    if not directory.is_dir() and not args.storage:
        names = ", ".join(path.name for path in list_sweep_dirs(root)) or "none"
        print(f"{PROG}: no sweep {args.name!r} under {root} (sweeps: {names})", file=sys.stderr)
        return EXIT_USAGE
    study, summary = _study(args, directory)
    if summary is None:
        print(f"{PROG}: sweep {args.name!r} has no leaderboard yet ({directory})", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        sys.stdout.write(msgspec.json.encode(summary).decode() + "\n")
    else:
        print(render(summary, args.top))
    if study is not None and not args.no_plots:
        _plots(study, Path(args.plots) if args.plots else directory, quiet=args.json)
    return 0


def _study(args: argparse.Namespace, directory: Path) -> tuple[Any, SweepSummary | None]:
    """The study (None without Optuna or a study file) and its leaderboard."""
    from operant.trainer.sweep.study import missing_optuna

    url = args.storage or f"sqlite:///{directory / STUDY_FILE}"
    if missing_optuna() is not None or not (args.storage or (directory / STUDY_FILE).exists()):
        return None, read_summary(directory)
    import optuna

    from operant.trainer.sweep.study import open_storage, redacted, summarize

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=args.name, storage=open_storage(url))
    except KeyError:
        return None, read_summary(directory)
    return study, summarize(study, redacted(url))


def render(summary: SweepSummary, top: int) -> str:
    """The leaderboard: a head line, the best trial's parameters, the best `top` trials
    (confirmed ones first, by their confirmed value: the sweep's best is chosen by it)."""
    lines = [
        f"sweep {summary.name}: {summary.metric} ({summary.direction}); "
        f"{summary.complete} complete, {summary.pruned} pruned, {summary.failed} failed, "
        f"{summary.running} running of {summary.n_trials}; storage {summary.storage}"
    ]
    if summary.confirm:
        lines[0] += (
            f"; {summary.confirmed} of the best {summary.confirm} confirmed on "
            f"{summary.confirm_seeds} fresh seeds"
        )
        lines[0] += stopped_words(summary)
    if summary.best is None:
        return "\n".join([*lines, "no trial has completed yet"])
    lines += _best_lines(summary)
    done = [
        row
        for row in summary.trials
        if row.state == "complete" and row.value is not None and row.confirm_of is None
    ]
    sign = 1.0 if summary.direction == "minimize" else -1.0
    done.sort(key=lambda row: (row.confirmed is None, sign * (row.confirmed or row.value or 0.0)))
    names = list(summary.best.params)
    header = ["TRIAL", summary.metric.upper(), "CONFIRMED"]
    header += [name.split(".")[-1].upper() for name in names]
    cells = [header] + [
        [str(row.number), _number(row.value), _number(row.confirmed)]
        + [_number(row.params.get(n)) for n in names]
        for row in done[:top]
    ]
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    lines.append("")
    lines += ["  ".join(c.rjust(w) for c, w in zip(line, widths)).rstrip() for line in cells]
    return "\n".join(lines)


def _best_lines(summary: SweepSummary) -> list[str]:
    """The best trial: its value, its confirmation's and their runs, its parameters."""
    best = summary.best
    assert best is not None
    line = f"best: trial {best.number}, {summary.metric} {_number(best.value)}"
    if best.confirmed is not None:
        runs = [
            run_id
            for row in summary.trials
            if row.confirm_of == best.number and row.state == "complete"
            for run_id in row.run_ids
        ]
        line += f" (runs {', '.join(best.run_ids)}); confirmed {_number(best.confirmed)}"
        line += f" on {summary.confirm_seeds} fresh seeds (runs {', '.join(runs)})"
    else:
        line += f", runs {', '.join(best.run_ids)}"
    return [line] + [f"  {path} = {_number(value)}" for path, value in best.params.items()]


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return "-" if value is None else str(value)


def _plots(study: Any, directory: Path, quiet: bool) -> None:
    """Optuna's optimisation history and parameter importances as PNGs in `directory`."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            f"{PROG}: no plots: matplotlib is not installed (pip install 'operant-rl[bench]')",
            file=sys.stderr,
        )
        return
    import optuna
    from optuna.visualization import matplotlib as optuna_plots

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    draws: list[Callable[[Any], Any]] = [
        optuna_plots.plot_optimization_history,
        optuna_plots.plot_param_importances,
    ]
    for name, draw in zip(PLOTS, draws):
        try:
            with warnings.catch_warnings():  # Optuna calls its matplotlib plots experimental
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                axes = draw(study)
        except (ValueError, RuntimeError) as error:  # too few complete trials to judge
            print(f"{PROG}: no {name}: {error}", file=sys.stderr)
            continue
        figure = axes.figure
        figure.set_size_inches(8, 5)
        figure.tight_layout()
        figure.savefig(directory / name, dpi=100)
        plt.close(figure)
        written.append(str(directory / name))
    if written and not quiet:
        print(f"plots: {', '.join(written)}")
