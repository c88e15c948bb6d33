"""What the sweep's own process costs its trials: the same sweep run by two builds of
operant, alternating, each time the CPU seconds the sweep's process took (not its trials')
and the seconds its first trials took to solve (their parameters are the sampler's start-up
draws, the same in both builds for one sampler seed, so the difference is what the sweep's
process took from the cores they trained on).

    python benchmarks/sweep_overhead.py configs/sweeps/CartPole-v1.toml --other OLD --rounds 3

OLD is a directory holding another build's `operant` package (put first on PYTHONPATH for
its sweeps); the other arm is the installed one. To compare with a commit whose change is in
Python files only: `cp -rL build/__editable__.*/operant OLD/` and `git show COMMIT:FILE >
OLD/operant/FILE` for each file the change touched. The sweep runs with `--n-trials` trials
(32) and no confirmation; prints one JSON object per sweep, then the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sweep_pruning import run_sweep, total_steps, variant

from operant.shared.sweeps import read_summary, sweep_dir

FIRST = 10
"""Trials compared by number: the TPE sampler's random start-up draws."""


def one_sweep(source: Path, root: Path, name: str, trials: int, other: str | None) -> dict:
    path = variant(source, root, name, 0, None, n_trials=trials, confirm=0)
    env = {**os.environ, "PYTHONPATH": other} if other else None
    started = time.perf_counter()
    cpu = run_sweep(["operant", "sweep", str(path), "--runs-dir", str(root / "runs"),
                     "--workers", "2"], env)  # fmt: skip
    directory = sweep_dir(root / "runs", name)
    summary = read_summary(directory)
    assert summary is not None
    first = {row.number: row.value for row in summary.trials if row.number < FIRST}
    return {
        "sweep": name, "sweep_cpu_s": round(cpu, 2),
        "wall_s": round(time.perf_counter() - started, 1),
        "steps": total_steps(directory), "pruned": summary.pruned,
        "first": [first.get(number) for number in range(FIRST)],
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("sweep_file", type=Path)
    parser.add_argument("--other", required=True, help="a directory holding another operant")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n-trials", type=int, default=32)
    args = parser.parse_args()
    rows: dict[str, list[dict]] = {"other": [], "this": []}
    with tempfile.TemporaryDirectory() as scratch:
        for index in range(args.rounds):
            arms = ("other", "this") if index % 2 == 0 else ("this", "other")
            for arm in arms:
                other = str(Path(args.other).resolve()) if arm == "other" else None
                row = one_sweep(args.sweep_file.resolve(), Path(scratch), f"{arm}-{index}",
                                args.n_trials, other)  # fmt: skip
                print(json.dumps(row), flush=True)
                rows[arm].append(row)
    ratios = [
        a / b
        for old, new in zip(rows["other"], rows["this"], strict=True)
        for a, b in zip(old["first"], new["first"], strict=True)
        if a is not None and b is not None
    ]
    print(json.dumps({
        "sweep_cpu_s": {arm: statistics.median(r["sweep_cpu_s"] for r in rs)
                        for arm, rs in rows.items()},
        "wall_s": {arm: statistics.median(r["wall_s"] for r in rs) for arm, rs in rows.items()},
        "steps": {arm: statistics.median(r["steps"] for r in rs) for arm, rs in rows.items()},
        "first_trials_other_over_this": statistics.median(ratios) if ratios else None,
        "first_trials_compared": len(ratios),
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
