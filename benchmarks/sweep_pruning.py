"""What pruning saves: a sweep file run with its pruner and with `pruner = "none"`, for each
sampler seed, one after the other; the steps every trial's runs trained, the wall-clock, and
the best value of each.

    python benchmarks/sweep_pruning.py configs/sweeps/CartPole-v1.toml --seeds 0 1 2 --workers 2

The sweeps go under a temporary runs root; prints one JSON object per sweep.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from operant.shared.sweeps import read_summary, sweep_dir
from operant.trainer.config import toml_value
from operant.trainer.sweep.spec import config_toml


def total_steps(directory: Path) -> int:
    """The steps every run of the sweep trained (each run's last record)."""
    summary = read_summary(directory)
    assert summary is not None
    total = 0
    for row in summary.trials:
        for run_id in row.run_ids:
            lines = (directory / run_id / "progress.jsonl").read_text().splitlines()
            total += json.loads(lines[-1])["global_step"] if lines else 0
    return total


def variant(source: Path, root: Path, name: str, seed: int, pruner: str | None) -> Path:
    """The sweep file with another name, sampler seed and (if given) pruner, its base
    config's path made absolute."""
    data = tomllib.loads(source.read_text())
    table = data["sweep"]
    if "base" in table:
        table["base"] = str((source.parent / table["base"]).resolve())
    table.update(name=name, sampler_seed=seed, **({"pruner": pruner} if pruner else {}))
    path = root / f"{name}.toml"
    sweep = {key: value for key, value in table.items() if not isinstance(value, dict)}
    tables = {f"sweep.{key}": value for key, value in table.items() if isinstance(value, dict)}
    params = tables.pop("sweep.params", {})
    text = config_toml(
        {"sweep": sweep, **tables, **{k: v for k, v in data.items() if k != "sweep"}}
    )
    text += "\n[sweep.params]\n" + "".join(
        f'"{key}" = {toml_value(value)}\n' for key, value in params.items()
    )
    path.write_text(text)
    return path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("sweep_file", type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--workers", default="2")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        for seed in args.seeds:
            for label, pruner in (("pruned", None), ("unpruned", "none")):
                name = f"{label}-{seed}"
                path = variant(args.sweep_file, root, name, seed, pruner)
                started = time.perf_counter()
                subprocess.run(
                    ["operant", "sweep", str(path), "--runs-dir", str(root / "runs"),
                     "--workers", args.workers],
                    check=True, capture_output=True,
                )  # fmt: skip
                wall = time.perf_counter() - started
                directory = sweep_dir(root / "runs", name)
                summary = read_summary(directory)
                assert summary is not None and summary.best is not None
                print(json.dumps({
                    "sweep": name, "wall_s": round(wall, 1), "steps": total_steps(directory),
                    "best": summary.best.value, "pruned": summary.pruned,
                    "best_params": summary.best.params,
                }), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
