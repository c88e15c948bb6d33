"""Sweeps' best configs against the shipped one, on fresh seeds, run alternately.

    python benchmarks/sweep_compare.py --runs-dir RUNS --sweep cartpole [other ...] \
        --config configs/CartPole-v1.toml --seeds 101 102 103 104 105

Each seed trains the shipped config, then each sweep's best parameters (operant sweep's
sweep.json: the confirmed best where the sweep confirmed its best trials) on top of it, one
after the other (so that a slow moment of the machine hits all), each until
train.target_return. Prints, for each, the training seconds to the target (the run's `solved`
record's elapsed_s) and each sweep's median ratio; --json for a record.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from operant.shared.sweeps import read_summary, sweep_dir
from operant.trainer.config import toml_value


def solve_seconds(config: str, sets: list[str], seed: int, root: Path, run_id: str) -> float:
    command = ["operant-train", "--config", config, "--seed", str(seed), "--quiet"]
    command += ["--runs-dir", str(root), "--run-id", run_id]
    for assignment in sets:
        command += ["--set", assignment]
    subprocess.run(command, check=True, capture_output=True)
    records = [json.loads(line) for line in (root / run_id / "progress.jsonl").open()]
    solved = [record["elapsed_s"] for record in records if record.get("solved")]
    return solved[0] if solved else float("inf")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs-dir", required=True)
    parser.add_argument("--sweep", required=True, nargs="+")
    parser.add_argument("--config", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[101, 102, 103, 104, 105])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    arms: dict[str, list[str]] = {"default": []}
    params = {}
    for name in args.sweep:
        summary = read_summary(sweep_dir(Path(args.runs_dir), name))
        if summary is None or summary.best is None:
            print(f"no best trial in sweep {name}", file=sys.stderr)
            return 2
        params[name] = summary.best.params
        arms[name] = [f"{path}={toml_value(value)}" for path, value in params[name].items()]
    times: dict[str, list[float]] = {name: [] for name in arms}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        for seed in args.seeds:
            for name, sets in arms.items():
                seconds = solve_seconds(args.config, sets, seed, root, f"{name}-{seed}")
                times[name].append(seconds)
                print(f"seed {seed} {name}: {seconds:.3f} s", file=sys.stderr)
    medians = {name: statistics.median(values) for name, values in times.items()}
    speedup = {name: medians["default"] / medians[name] for name in args.sweep}
    result = {"best_params": params, "seconds": times, "median_s": medians, "speedup": speedup}
    if args.json:
        print(json.dumps(result))
    else:
        for name in args.sweep:
            print(
                f"median seconds to the target: default {medians['default']:.3f}, {name}'s best "
                f"{medians[name]:.3f}: {speedup[name]:.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
