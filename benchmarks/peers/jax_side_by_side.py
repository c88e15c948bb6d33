#!/usr/bin/env python3
"""The same MinAtar recipe trained by Operant and by a PureJaxRL-style JAX PPO, side by side
(issue 37, "Same recipe, side by side"): for each seed, both runs, one after the other (who
goes first alternates by seed), each alone on the machine under the bench lock, one JSONL
record per run and a summary record last.

    bash benchmarks/peers/setup_jax.sh              # once: the JAX venv, /work/venvs/jax
    BENCH_LOCK=/tmp/operant-bench.lock python benchmarks/peers/jax_side_by_side.py \
        [--seeds 1,2,3] [--total-steps 5013504] [--out benchmarks/records/FILE.jsonl]

Run it with Operant's venv active (it calls `operant-train` next to this Python). The lock is
taken by this driver around each run alone (`fcntl.flock` on $BENCH_LOCK, or --lock), so the
wall times below never count a wait for it, and others get the machine between runs.

The recipe (both sides): gymnax's defaults on the JAX side (Breakout-MinAtar, no sticky
actions, 1,000-step episode cap, minimal action set); Operant's `MinAtar-Breakout-v1` native
kernel with `sticky_action_prob = 0`, `max_episode_steps = 1000`. An MLP 64-64 ReLU over the
flattened 10x10x4 frame, separate actor and critic; lr 5e-3 annealed to 0, Adam eps 1e-5, grad
norm 0.5; 64 envs x 128 steps; 4 epochs x 8 minibatches; gamma 0.99, lambda 0.95, clip 0.2
(policy and value), entropy 0.01, value 0.5, per-minibatch advantage normalisation; 5,013,504
steps (612 updates of 8,192) by default. One difference is each side's own rule: a 1,000-step
truncation bootstraps with gamma x V(final observation) in Operant and ends the return as a
terminal does in PureJaxRL (--bootstrap-truncation gives the JAX side Operant's rule).
Threads are each side's default: XLA:CPU's pool over both cores; torch with
train.torch_threads = 1 plus Operant's own threads.

What each record holds, alike for both sides:
- sps: steps trained / training seconds (train_s). JAX: its compiled program's run, compile
  excluded (compile_s apart). Operant: the last update's sps_mean (global_step / elapsed_s
  from the trainer's start to the end of its last update; there is no compile); finish_s is
  the summary's elapsed_s, which adds the final checkpoint.
- return_mean_100: the mean return of the last 100 finished episodes, across all envs, at the
  end. Operant's episode_return_mean is exactly that (trainer/loop/update_record.py: the env's ring
  of finished returns, operant.envs.face.episodes.recent_returns(100)); the JAX script keeps the
  same ring inside its rollout scan.
- process_wall_s: the whole command, imports, compile and startup included (time to a policy).
- curve: [global_step, last-100 mean] after every update.

The summary: per side, the median steps/s and the returns per seed; the ratio of the medians
(Operant / JAX) and whether each Operant return lies within the JAX seeds' [min, max].
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
JAX_SCRIPT = ROOT / "benchmarks" / "peers" / "purejaxrl_minatar.py"
DEFAULT_LOCK = os.environ.get("BENCH_LOCK", "/tmp/operant-bench.lock")
SIDES = ("jax", "operant")

OPERANT_SETTINGS = (
    "env.impl=native",
    "env.num_envs=64",
    "env.max_episode_steps=1000",
    "env.options.sticky_action_prob=0",
    "policy.kind=mlp",
    "policy.shared=false",
    "policy.activation=relu",
    "policy.hidden_sizes=[64, 64]",
    "ppo.num_steps=128",
    "ppo.learning_rate=5e-3",
    "ppo.anneal_lr=true",
    "ppo.adam_eps=1e-5",
    "ppo.max_grad_norm=0.5",
    "ppo.update_epochs=4",
    "ppo.num_minibatches=8",
    "ppo.gamma=0.99",
    "ppo.gae_lambda=0.95",
    "ppo.clip_coef=0.2",
    "ppo.clip_vloss=true",
    "ppo.norm_adv=true",
    "ppo.ent_coef=0.01",
    "ppo.vf_coef=0.5",
)
"""Operant's side of the recipe; the defaults that are part of it are stated too, so that a
change of default cannot change the comparison."""


def operant_command(train: str, seed: int, total_steps: int, runs_dir: str) -> list[str]:
    command = [train, "--env", "MinAtar-Breakout-v1", "--seed", str(seed)]
    command += ["--total-steps", str(total_steps), "--log-format", "json"]
    for setting in OPERANT_SETTINGS:
        command += ["--set", setting]
    return command + ["--runs-dir", runs_dir]


def jax_command(python: str, seed: int, total_steps: int, out: str, bootstrap: bool) -> list[str]:
    command = [python, str(JAX_SCRIPT), "--seed", str(seed), "--total-steps", str(total_steps)]
    return command + ["--out", out] + (["--bootstrap-truncation"] if bootstrap else [])


def locked_run(
    command: list[str], lock: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run `command` holding the bench lock: its result, and its wall seconds (the wait for the
    lock excluded) with the 1-minute load average before and after (others' work, outside the
    lock, shows there)."""
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        timing = {
            "process_wall_s": round(time.perf_counter() - started, 3),
            "load_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        }
        return done, timing


def failed(side: str, done: subprocess.CompletedProcess[str], command: list[str]) -> SystemExit:
    lines = (done.stderr or done.stdout).strip().splitlines()
    last = lines[-1] if lines else "(no output)"
    return SystemExit(
        f"jax_side_by_side: the {side} run exited {done.returncode}: {last}\n"
        f"  command: {' '.join(command)}"
    )


def run_jax(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="jax-side-") as scratch:
        out = str(Path(scratch) / "record.json")
        command = jax_command(args.jax_python, seed, args.total_steps, out, args.bootstrap)
        done, timing = locked_run(command, args.lock)
        if done.returncode != 0:
            raise failed("jax", done, command)
        record = json.loads(Path(out).read_text())
    return {
        "side": "jax",
        "sps": record["sps"],
        "train_s": record["train_s"],
        "compile_s": record["compile_s"],
        "return_mean_100": record["return_mean_100"],
        "episodes": record["episodes"],
        "total_steps": record["total_steps"],
        **timing,
        "versions": record["versions"],
        "machine": record["machine"],
        "cpu_s": record["cpu_s"],
        "cores_busy": record["cores_busy"],
        "curve": record["curve"],
        "command": command,
    }


def operant_lines(stdout: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The progress records and the final summary of `operant-train --log-format json`."""
    progress, summary = [], None
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        if "summary" in record:
            summary = record["summary"]
        elif "global_step" in record:
            progress.append(record)
    if summary is None or not progress:
        raise SystemExit("jax_side_by_side: operant-train printed no summary; see its log")
    return progress, summary


def run_operant(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    runs_dir = tempfile.mkdtemp(prefix="operant-side-")
    try:
        command = operant_command(args.operant_train, seed, args.total_steps, runs_dir)
        done, timing = locked_run(command, args.lock)
        if done.returncode != 0:
            raise failed("operant", done, command)
    finally:
        shutil.rmtree(runs_dir, ignore_errors=True)
    progress, summary = operant_lines(done.stdout)
    last = progress[-1]
    return {
        "side": "operant",
        "sps": last["sps_mean"],
        "train_s": last["elapsed_s"],
        "last_update_sps": last["sps"],
        "finish_s": summary["elapsed_s"],
        "stopped_by": summary.get("stopped_by"),
        "return_mean_100": summary["episode_return_mean"],
        "episodes": last["episodes"],
        "total_steps": summary["global_step"],
        **timing,
        "curve": [[p["global_step"], p["episode_return_mean"]] for p in progress],
        "command": command,
    }


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Median steps/s per side, returns per seed, the ratio and the spread check."""
    by_side = {side: [r for r in records if r["side"] == side] for side in SIDES}
    summary: dict[str, Any] = {"kind": "summary"}
    for side, runs in by_side.items():
        if runs:
            summary[side] = {
                "sps_median": statistics.median(r["sps"] for r in runs),
                "returns": {r["seed"]: r["return_mean_100"] for r in runs},
                "process_wall_s_median": statistics.median(r["process_wall_s"] for r in runs),
            }
    if by_side["jax"] and by_side["operant"]:
        jax_returns = [r["return_mean_100"] for r in by_side["jax"]]
        low, high = min(jax_returns), max(jax_returns)
        summary["sps_ratio_operant_over_jax"] = round(
            summary["operant"]["sps_median"] / summary["jax"]["sps_median"], 3
        )
        summary["jax_return_spread"] = [low, high]
        summary["operant_returns_within_spread"] = [
            low <= r["return_mean_100"] <= high for r in by_side["operant"]
        ]
    return summary


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated, e.g. 1,2,3")
    parser.add_argument("--total-steps", type=int, default=5_013_504)
    parser.add_argument("--sides", default="jax,operant", help="jax, operant or both")
    parser.add_argument(
        "--jax-python", default=os.environ.get("JAX_PYTHON", "/work/venvs/jax/bin/python")
    )
    parser.add_argument(
        "--operant-train", default=str(Path(sys.executable).parent / "operant-train")
    )
    parser.add_argument("--bootstrap", action="store_true", help="JAX side bootstraps truncation")
    parser.add_argument("--lock", default=DEFAULT_LOCK)
    today = datetime.date.today().isoformat()
    default_out = ROOT / "benchmarks" / "records" / f"jax_side_by_side-{today}.jsonl"
    parser.add_argument("--out", type=Path, default=default_out)
    args = parser.parse_args(argv)
    try:
        args.seeds = [int(seed) for seed in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds must be comma-separated integers, got {args.seeds!r}")
    args.sides = [side.strip() for side in args.sides.split(",")]
    if not args.sides or any(side not in SIDES for side in args.sides):
        parser.error(f"--sides must name jax and/or operant, got {','.join(args.sides)!r}")
    if "jax" in args.sides and not Path(args.jax_python).exists():
        parser.error(f"no JAX venv at {args.jax_python}: run benchmarks/peers/setup_jax.sh")
    if "operant" in args.sides and not Path(args.operant_train).exists():
        parser.error(f"no operant-train at {args.operant_train}: activate Operant's venv")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runners = {"jax": run_jax, "operant": run_operant}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    records = []
    for index, seed in enumerate(args.seeds):
        # Who goes first alternates, so that a drift of the machine's speed falls on both.
        order = args.sides if index % 2 == 0 else list(reversed(args.sides))
        for side in order:
            record = {"kind": "run", "seed": seed, "date": datetime.date.today().isoformat()}
            record.update(runners[side](args, seed))
            records.append(record)
            with args.out.open("a") as out:
                out.write(json.dumps(record) + "\n")
            print(
                f"seed {seed} {side}: {record['sps']:,.0f} steps/s, last-100 return "
                f"{record['return_mean_100']}, {record['process_wall_s']:.1f} s in all",
                flush=True,
            )
    summary = summarise(records)
    with args.out.open("a") as out:
        out.write(json.dumps(summary) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
