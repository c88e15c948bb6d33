"""`operant bench trainer --nproc-per-node 1,2`: the same training run with K ranks.

Each round runs operant-train --nproc-per-node K (torchrun, gloo) once per K, the Ks in
alternating order from round to round, with the config, seed and overrides given; a run's
steps/s is its summary's (global steps over the seconds trained, start-up excluded), and
a run is solved when its pooled mean of the last 100 episodes reached train.target_return.
Reported per K: median steps/s, the ratio to the first K's median and the median of the
per-round ratios, seeds solved and seconds to solve; and what one update all-reduces (the
flat gradient of every minibatch step, in bytes), which is what sets the cost of scaling
out (docs/distributed.md).

The runs train what `trainer` mode would (--env, --num-envs, --num-steps, --minibatches,
--target-return, then the --set overrides; the config checked before the first run starts),
and the result is judged as a trainer record: exit 1 when a K's steps/s vary by more than
--max-cv or an enforced --target-sps is missed. What runs in other processes is not measured
here (--max-mem-delta, --plot, --baseline, the bounds): those flags are refused.

By default the config's env.num_envs is the run's total at every K (strong scaling: K ranks
share one batch); with --weak-scaling each rank steps the config's num_envs, so the run's
total, its batch and its step budget grow with K while its number of updates stays the
config's (as CleanRL's multi-GPU PPO scales: K times the data per gradient step).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from operant.trainer.bench.measure import _cell_overrides, _cells, summarize


def _overrides(args: argparse.Namespace) -> list[str]:
    """What the bench's flags set in each run's config, as `trainer` mode sets them (its
    --env, --num-envs, --num-steps, --minibatches and --target-return; each run's own seed),
    the --set overrides last."""
    (cell,) = _cells(args)
    overrides = _cell_overrides(cell)
    if args.env is not None:
        overrides.append(f"env.id={args.env}")
    if args.target_return is not None:
        overrides.append(f"train.target_return={args.target_return}")
    return [*overrides, *args.overrides]


def _check_config(args: argparse.Namespace, overrides: list[str]) -> None:
    """The config every run trains, refused before the first torchrun starts (a ConfigError
    or EnvError, one line, exit 2) rather than as the first run's failure."""
    from operant.envs import resolve_impl
    from operant.trainer.config import derive, load_config
    from operant.trainer.run import preflight

    config = load_config(args.config, overrides)
    derive(config)
    preflight.check(config, resolve_impl(config.env.id, config.env.impl))


def _run(
    args: argparse.Namespace, overrides: list[str], ranks: int, seed: int, root: Path
) -> dict[str, Any]:
    command = [sys.executable, "-m", "operant.trainer.run.main", "--nproc-per-node", str(ranks)]
    if args.config:
        command += ["--config", args.config]
    command += ["--seed", str(seed), "--runs-dir", str(root), "--run-id", f"k{ranks}-s{seed}"]
    command += ["--log-format", "json", "--quiet"]
    if args.total_steps:
        command += ["--total-steps", str(args.total_steps)]
    for override in overrides:
        command += ["--set", override]
    if args.weak_scaling:
        from operant.trainer.config import load_config

        config = load_config(args.config, overrides)
        total = args.total_steps or config.train.total_steps
        command += ["--set", f"env.num_envs={config.env.num_envs * ranks}"]
        command += ["--set", f"train.total_steps={total * ranks}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RunFailed(f"{ranks} rank(s), seed {seed} failed: {done.stderr.strip()[-500:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])["summary"]
    run_dir = Path(summary["run_dir"])
    policy = torch.load(run_dir / "model.pt", weights_only=True)["policy"]
    config = json.loads((run_dir / "run.json").read_text())["config"]
    steps_per_update = config["ppo"]["num_minibatches"] * config["ppo"]["update_epochs"]
    parameters = sum(tensor.numel() for tensor in policy.values())
    return {
        "ranks": ranks,
        "seed": seed,
        "env_id": config["env"]["id"],
        "sps_mean": summary["sps_mean"],
        "global_step": summary["global_step"],
        "solved_at_s": summary.get("solved_at_s"),
        "allreduce_bytes_per_update": 4 * parameters * steps_per_update,
    }


class RunFailed(RuntimeError):
    """A run of the measurement failed (its stderr's tail in the message): exit 1."""


def bench_ranks(args: argparse.Namespace) -> dict[str, Any]:
    counts: list[int] = args.nproc_per_node
    overrides = _overrides(args)
    _check_config(args, overrides)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="operant-bench-ranks-") as root:
        for index, seed in enumerate(args.seeds):
            order = counts if index % 2 == 0 else list(reversed(counts))
            for ranks in order:
                run = _run(args, overrides, ranks, seed, Path(root))
                runs.append(run)
                solved = run["solved_at_s"]
                print(
                    f"  {ranks} rank(s), seed {seed}: {run['sps_mean']:,.0f} steps/s, "
                    + (f"solved at {solved:.2f}s" if solved is not None else "NOT solved"),
                    flush=True,
                )
    by_count = {k: [run for run in runs if run["ranks"] == k] for k in counts}
    first = counts[0]
    table = {}
    for ranks, mine in by_count.items():
        sps = summarize([run["sps_mean"] for run in mine])
        ratios = [
            run["sps_mean"] / base["sps_mean"]
            for run, base in zip(mine, by_count[first], strict=True)
        ]
        solve = [run["solved_at_s"] for run in mine if run["solved_at_s"] is not None]
        table[ranks] = {
            "sps": sps,
            "ratio_of_medians": round(
                sps["median"] / statistics.median(run["sps_mean"] for run in by_count[first]), 3
            ),
            "ratio_median": round(statistics.median(ratios), 3),
            "solved": f"{len(solve)}/{len(mine)}",
            "solve_s_median": round(statistics.median(solve), 3) if solve else None,
            "allreduce_bytes_per_update": mine[0]["allreduce_bytes_per_update"] if ranks > 1 else 0,
        }
        print(
            f"{ranks} rank(s): median {sps['median']:,.0f} steps/s, x{table[ranks]['ratio_median']}"
            f" of {first} (per-round median), solved {table[ranks]['solved']}",
            flush=True,
        )
    return {"runs": runs, "ranks": table}
