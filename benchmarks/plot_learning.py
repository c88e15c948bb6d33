"""Learning curves of finished runs: the mean return of each update (progress.jsonl's
episode_return_mean; for a many-agent env, the mean reward per agent-episode) against
environment steps (global_step: agent-steps for a many-agent env), one line per run, with an
optional horizontal baseline (e.g. a random policy's return on the same env).

    python benchmarks/plot_learning.py RUN_DIR [RUN_DIR ...] --out docs/img/x.png
        [--baseline 1.33 --baseline-label "random policy"] [--title TEXT]

Needs matplotlib (`pip install 'operant-rl[bench]'`). Prints, per run, the last update's return
and the first step at which the return reached 3x the baseline (when one is given).
"""

from __future__ import annotations

import json
from pathlib import Path

from operant.shared.cli_parser import OneLineParser


def curve(run_dir: Path) -> tuple[list[int], list[float]]:
    steps, returns = [], []
    for line in (run_dir / "progress.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("episode_return_mean") is not None:
            steps.append(record["global_step"])
            returns.append(record["episode_return_mean"])
    return steps, returns


def main() -> None:
    parser = OneLineParser(prog="plot_learning.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--baseline", type=float)
    parser.add_argument("--baseline-label", default="random policy")
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    for run_dir in args.runs:  # checked before plotting: one line, not a traceback
        if not (run_dir / "progress.jsonl").is_file():
            parser.error(f"{run_dir} holds no progress.jsonl: give run directories")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    for run_dir in args.runs:
        steps, returns = curve(run_dir)
        if not steps:
            parser.error(f"{run_dir}: no update with a mean return yet (no episode finished)")
        axes.plot(steps, returns, label=run_dir.name)
        crossing = None
        if args.baseline is not None:
            crossing = next((s for s, r in zip(steps, returns) if r >= 3 * args.baseline), None)
        print(
            json.dumps(
                {
                    "run": run_dir.name,
                    "last_step": steps[-1],
                    "last_return": returns[-1],
                    "first_step_at_3x_baseline": crossing,
                }
            )
        )
    if args.baseline is not None:
        axes.axhline(args.baseline, color="grey", linestyle="--", label=args.baseline_label)
        axes.axhline(
            3 * args.baseline, color="grey", linestyle=":", label="3x " + args.baseline_label
        )
    axes.set_xlabel("environment steps (agent-steps)")
    axes.set_ylabel("mean return")
    axes.set_title(args.title)
    axes.legend()
    figure.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(args.out, dpi=100)


if __name__ == "__main__":
    main()
