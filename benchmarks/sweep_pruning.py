"""What pruning saves: a sweep file run with its pruner and with `pruner = "none"`, for each
sampler seed, one after the other; the steps every trial's runs trained, the wall-clock, and
the best value of each, and the CPU seconds the sweep's own process took.

    python benchmarks/sweep_pruning.py configs/sweeps/CartPole-v1.toml --seeds 0 1 2 --workers 2

The sweeps go under a temporary runs root (or `--keep DIR`, for benchmarks/sweep_compare.py
to train their bests: `--runs-dir DIR/runs --sweep pruned-0 unpruned-0 ...`); prints one
JSON object per sweep. The steps count every run, a confirmation stage's included
(`confirm_steps` says how many of them were its).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

from operant.shared.sweeps import read_summary, sweep_dir
from operant.trainer.config import toml_value
from operant.trainer.sweep.spec import config_toml


def total_steps(directory: Path, confirmations: bool | None = None) -> int:
    """The steps every run of the sweep trained (each run's last record); with
    `confirmations` True or False, only the confirmation stage's runs or only the others."""
    summary = read_summary(directory)
    assert summary is not None
    total = 0
    for row in summary.trials:
        if confirmations is not None and (row.confirm_of is not None) != confirmations:
            continue
        for run_id in row.run_ids:
            progress = directory / run_id / "progress.jsonl"
            if not progress.exists():  # a seed its trial never ran (pruned, or stopped)
                continue
            lines = progress.read_text().splitlines()
            total += json.loads(lines[-1])["global_step"] if lines else 0
    return total


def run_sweep(command: list[str], env: dict[str, str] | None = None) -> float:
    """Run a sweep to its end (in `env`, else this process's environment); the CPU seconds
    its own process took (not its trials'), read from /proc every 0.05 s: what the sweep's
    bookkeeping takes from the cores its trials train on."""
    cpu = 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        while process.poll() is None:
            try:
                stat = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
                cpu = (int(stat[11]) + int(stat[12])) / ticks  # utime, stime
            except (OSError, IndexError, ValueError):
                pass
            time.sleep(0.05)
        if process.returncode != 0:
            log.seek(0)
            said = log.read().decode(errors="replace")
            raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{said}")
    return cpu


def variant(
    source: Path, root: Path, name: str, seed: int, pruner: str | None, **sweep_keys: object
) -> Path:
    """The sweep file with another name, sampler seed and (if given) pruner and other
    `[sweep]` keys, its base config's path made absolute."""
    data = tomllib.loads(source.read_text())
    table = data["sweep"]
    if "base" in table:
        table["base"] = str((source.parent / table["base"]).resolve())
    table.update(name=name, sampler_seed=seed, **({"pruner": pruner} if pruner else {}))
    table.update(sweep_keys)
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
    parser.add_argument("--keep", type=Path, help="a directory to keep the sweeps in")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = args.keep or Path(scratch)
        root.mkdir(parents=True, exist_ok=True)
        for seed in args.seeds:
            for label, pruner in (("pruned", None), ("unpruned", "none")):
                name = f"{label}-{seed}"
                path = variant(args.sweep_file, root, name, seed, pruner)
                started = time.perf_counter()
                cpu = run_sweep(
                    ["operant", "sweep", str(path), "--runs-dir", str(root / "runs"),
                     "--workers", args.workers]
                )  # fmt: skip
                wall = time.perf_counter() - started
                directory = sweep_dir(root / "runs", name)
                summary = read_summary(directory)
                assert summary is not None and summary.best is not None
                print(json.dumps({
                    "sweep": name, "wall_s": round(wall, 1), "sweep_cpu_s": round(cpu, 2),
                    "steps": total_steps(directory),
                    "confirm_steps": total_steps(directory, confirmations=True),
                    "best": summary.best.value, "best_confirmed": summary.best.confirmed,
                    "best_trial": summary.best.number, "pruned": summary.pruned,
                    "best_params": summary.best.params,
                }), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
