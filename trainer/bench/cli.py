"""`operant bench`: throughput, measured the same way every time.

Modes:
  env_only      env steps/s of one env id per implementation and num_envs, next to
                Gymnasium's own vectorised env measured in the same run (ratio printed);
                --validate first steps every implementation beside Gymnasium's env and
                compares (operant.envs.face.parity), or for Grid-v0 runs its two observation
                encoders in shadow (no Gymnasium env: --no-gymnasium is implied); --profile
                records an env's per-phase ns per step (Grid-v0's step_timing);
  trainer       end-to-end PPO training: steps/s and wall-clock seconds to reach a target
                mean return over the last 100 episodes, per seed, with the time per phase and
                two bounds for the same network and epochs: the overhead bound (the
                trainer's own torch calls timed alone) and the arithmetic bound (the FLOPs of
                a rollout forward and a PPO minibatch step at the rates this CPU's
                arithmetic reaches for their shapes;
                docs/journal/2026-11-22-training-end-to-end.md);
  trainer_eval  the rollout alone (policy forward + sampling + env + storage, no update):
                what acting costs, per round.

--matrix sweeps --num-envs x --num-steps x --minibatches (trainer modes) and reports the
best stable configuration. Every result is one JSON record (config, versions, machine,
per-round numbers, median and coefficient of variation, phase breakdown, memory growth)
printed and, with --output, written to a file; --baseline FILE... prints this run's medians
as ratios to earlier records of the same mode; --plot DIR draws the PNGs docs/journal/
shows. Exit codes: 0 ok; 1 a measurement was unstable (CV above --max-cv), below an enforced
--target-sps, or grew memory by more than --max-mem-delta after warm-up; 2 bad input, or a
--validate parity mismatch, or an option the mode does not read (refused, not ignored). A
benchmark never runs inside the test suite.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from operant.shared import atomic
from operant.shared.cli_parser import OneLineParser
from operant.trainer.bench import env_checks
from operant.trainer.bench.compare import _load_baselines, _status, compare
from operant.trainer.bench.measure import (
    bench_env_only,
    bench_trainer,
    bench_trainer_eval,
    machine,
)
from operant.trainer.bench.modes import MODES, foreign_option
from operant.trainer.bench.plot import plot

EXIT_USAGE = 2
EXIT_PARITY = 2  # a --validate mismatch: the numbers would be for the wrong dynamics
ENV_ONLY_NUM_ENVS = [256, 4096, 16384]


def _int_list(text: str, least: int = 1) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) < least:
        kind = "positive integers" if least == 1 else f"integers of at least {least}"
        raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}")
    return values


def _seed_list(text: str) -> list[int]:
    """Seeds as training takes them: 0 included."""
    return _int_list(text, least=0)


USAGE = """throughput, measured the same way every time (one JSON record; --output FILE).

  operant bench env_only --env CartPole-v1 --num-envs 256,4096   env steps/s per impl,
                                                                 beside Gymnasium's own
  operant bench trainer --config configs/CartPole-v1.toml --seeds 1,2,3
                                      training steps/s, time to the target, phases, bounds
  operant bench trainer_eval --config configs/minatar/Breakout.toml    the rollout alone
  operant bench trainer ... --baseline OLD.json       ratios to an earlier record

exit status: 0 sound; 1 unstable, below an enforced --target-sps, or memory grew;
2 bad input or a --validate parity mismatch. Modes and bounds: docs/benchmarks.md."""


def build_parser() -> argparse.ArgumentParser:
    """The `operant bench` command line: what to measure, how, and where results go."""
    parser = OneLineParser(
        prog="operant bench",
        usage="operant bench {env_only,trainer,trainer_eval} [options]",
        description=USAGE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_workload_arguments(parser)
    _add_measurement_arguments(parser)
    _add_config_and_output_arguments(parser)
    return parser


def _add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the mode and what it runs: env, impls, and the sizes a --matrix sweeps."""
    parser.add_argument("mode", choices=MODES)
    parser.add_argument(
        "--env",
        help="env id (env_only: default CartPole-v1; trainer modes: sets env.id over the "
        "config's, default the config's)",
    )
    parser.add_argument("--impl", default="native", help="comma-separated impls (env_only)")
    parser.add_argument(
        "--num-envs",
        type=_int_list,
        help="comma-separated env counts (env_only: default 256,4096,16384; "
        "trainer modes: the config's, several only with --matrix)",
    )
    parser.add_argument(
        "--num-steps", type=_int_list, help="trainer modes: rollout steps per env (ppo.num_steps)"
    )
    parser.add_argument(
        "--minibatches",
        type=_int_list,
        help="trainer modes: minibatches per epoch (ppo.num_minibatches)",
    )
    parser.add_argument(
        "--matrix",
        action="store_true",
        help="trainer modes: sweep num-envs x num-steps x minibatches and report "
        "the best stable configuration",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="trainer modes: updates (trainer) or rollouts (trainer_eval) before "
        "memory is baselined and rounds are timed",
    )
    parser.add_argument(
        "--total-steps", type=int, help="trainer: env steps per run (train.total_steps)"
    )
    parser.add_argument(
        "--nproc-per-node",
        type=_int_list,
        metavar="K,...",
        help="trainer: run operant-train --nproc-per-node K (torchrun) for each K, rounds "
        "alternating, and compare their steps/s (operant.trainer.bench.ranks)",
    )
    parser.add_argument(
        "--weak-scaling",
        action="store_true",
        help="with --nproc-per-node: each rank steps the config's env.num_envs (the batch "
        "grows with K) instead of sharing them",
    )


def _add_measurement_arguments(parser: argparse.ArgumentParser) -> None:
    """Add how to measure: validation, rounds, seeds, memory and bound checks."""
    parser.add_argument(
        "--validate",
        action="store_true",
        help="env_only: step each impl beside Gymnasium's env first (an env with two "
        "observation encoders, such as Grid-v0: both encoders) and exit 2 on any disagreement",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="env_only: record the env's per-phase nanoseconds per step over the measured "
        "rounds (envs with step_timing, such as Grid-v0)",
    )
    parser.add_argument(
        "--validate-steps",
        type=int,
        default=200,
        help="env_only: steps of the --validate shadow run",
    )
    parser.add_argument(
        "--max-mem-delta",
        type=float,
        metavar="MB",
        help="exit 1 if resident memory grows by more than this after warm-up",
    )
    parser.add_argument(
        "--no-bound", action="store_true", help="trainer: skip measuring the bounds"
    )
    parser.add_argument(
        "--bound-seconds",
        type=float,
        default=0.02,
        metavar="S",
        help="trainer: length of each timed call of the arithmetic bound's rate loops "
        "(shorter is quicker and noisier)",
    )
    parser.add_argument(
        "--plot", metavar="DIR", help="write PNG plots (SPS vs num_envs, phase breakdown) into DIR"
    )
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (median reported)")
    parser.add_argument(
        "--round-seconds", type=float, default=0.5, help="approximate length of one env_only round"
    )
    parser.add_argument(
        "--no-gymnasium", action="store_true", help="env_only: skip Gymnasium's vectorised env"
    )
    parser.add_argument(
        "--seeds",
        type=_seed_list,
        help="trainer: comma-separated seeds, one run each (a round), default 1,2,3; "
        "trainer_eval: the one seed of its env and policy, default 1",
    )
    parser.add_argument(
        "--target-return",
        type=float,
        default=None,
        help="trainer: stop a run once the last-100 mean return reaches this (default: the "
        "config's train.target_return, else the env's registered reward threshold, as "
        "operant-train judges solved: 475 for CartPole-v1; none for MinAtar and the grid)",
    )


def _add_config_and_output_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the training config, the pass/fail thresholds, and where results are written."""
    parser.add_argument("--config", help="trainer modes: TOML config")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        help="trainer modes: config override section.key=value",
    )
    parser.add_argument(
        "--max-cv",
        type=float,
        default=0.20,
        help="coefficient of variation above which a result is unstable",
    )
    parser.add_argument("--target-sps", type=float, help="minimum median steps/s")
    parser.add_argument(
        "--enforce-target", action="store_true", help="exit 1 when the median is below --target-sps"
    )
    parser.add_argument("--output", help="write the JSON record here")
    parser.add_argument(
        "--baseline",
        nargs="+",
        default=[],
        metavar="FILE",
        help="earlier --output records of the same mode: print this run's "
        "median steps/s as a ratio to each",
    )


def _usage_problem(args: argparse.Namespace) -> str | None:
    if args.rounds < 1:
        return "--rounds must be at least 1"
    if not 0 < args.round_seconds < 3600:
        return f"--round-seconds {args.round_seconds:g}: give seconds above 0 and below 3600"
    if not 0 <= args.max_cv < math.inf:
        return f"--max-cv {args.max_cv:g}: give a coefficient of variation of 0 or more"
    if not [part for part in args.impl.split(",") if part]:
        return "--impl names no implementation: give native, torch or reference (comma-separated)"
    if args.warmup < 0:
        return "--warmup must be 0 or more"
    if args.profile and args.mode != "env_only":
        return "--profile is an env_only option (the trainer's phases are in its metrics file)"
    if args.validate and args.mode != "env_only":
        return "--validate is an env_only option (training is validated by tests/test_learning.py)"
    if args.validate_steps < 1:
        return "--validate-steps must be at least 1"
    if args.mode == "env_only" and (args.matrix or args.num_steps or args.minibatches):
        return "--matrix, --num-steps and --minibatches are for the trainer modes"
    if args.nproc_per_node and (args.mode != "trainer" or args.matrix):
        return "--nproc-per-node is a trainer option, without --matrix"
    if args.total_steps is not None and args.total_steps < 1:
        return "--total-steps must be positive"
    foreign = foreign_option(build_parser(), args)
    if foreign:
        return foreign
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return "--plot needs matplotlib: pip install 'operant-rl[bench]'"
    return _path_problem(args)


def _path_problem(args: argparse.Namespace) -> str | None:
    """Where --output and --plot would write, checked before anything is measured (a bad one
    was a traceback after minutes of measuring, the results lost)."""
    if args.output:
        output = Path(args.output)
        if output.is_dir():
            return f"--output {output} is a folder: give a file name, e.g. {output / 'bench.json'}"
        if not output.parent.is_dir():
            return f"--output {output}: no folder {output.parent}; create it first"
        if not os.access(output.parent, os.W_OK):
            return f"--output {output}: cannot write into {output.parent}"
    if args.plot:
        folder = Path(args.plot)
        if folder.exists() and not folder.is_dir():
            return f"--plot {folder} is a file: give a folder for the plots"
        existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
        if existing is not None and not os.access(existing, os.W_OK):
            return f"--plot {folder}: cannot write into {existing}"
    return None


def _main_ranks(args: argparse.Namespace, record: dict[str, Any]) -> int:
    """`trainer --nproc-per-node K,...`: the runs under torchrun, judged as a trainer record
    is (--max-cv and an enforced --target-sps over every K's median)."""
    from operant.envs import EnvError
    from operant.trainer.bench.ranks import RunFailed, bench_ranks
    from operant.trainer.config import ConfigError

    try:
        record.update(bench_ranks(args))
    except (ConfigError, EnvError, ValueError) as error:
        print(f"operant bench: {error}", file=sys.stderr)
        return EXIT_USAGE
    except RunFailed as error:
        print(f"operant bench: {error}", file=sys.stderr)
        return 1
    if args.output:
        atomic.write_text(args.output, json.dumps(record, indent=2) + "\n")
    return _status(record, args)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problem = _usage_problem(args)
    if problem:
        print(f"operant bench: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if args.mode == "env_only" and args.num_envs is None:
        args.num_envs = ENV_ONLY_NUM_ENVS
    if args.mode == "env_only" and args.env is None:
        args.env = "CartPole-v1"
    if args.seeds is None:
        args.seeds = [1] if args.mode == "trainer_eval" else [1, 2, 3]
    try:
        baselines = _load_baselines(args.baseline, args.mode)
    except ValueError as error:
        print(f"operant bench: {error}", file=sys.stderr)
        return EXIT_USAGE
    from operant.envs import EnvError
    from operant.trainer.config import ConfigError

    record: dict[str, Any] = {
        "mode": args.mode,
        "args": vars(args),
        "machine": machine(),
        "time": time.time(),
    }
    if args.nproc_per_node:
        return _main_ranks(args, record)
    run = {
        "env_only": bench_env_only,
        "trainer": bench_trainer,
        "trainer_eval": bench_trainer_eval,
    }[args.mode]
    try:
        record.update(run(args))
    except (ConfigError, EnvError, ValueError) as error:
        print(f"operant bench: {error}", file=sys.stderr)
        return EXIT_USAGE
    validated = all(report["ok"] for report in record.get("validation", []))
    if baselines and validated:
        record["baselines"] = compare(record, baselines)
    text = json.dumps(record, indent=2)
    if args.output:
        atomic.write_text(args.output, text + "\n")
    if not validated:
        print(
            f"operant bench: --validate: "
            f"{env_checks.disagreement(args.env, record['validation'])}; nothing was measured",
            file=sys.stderr,
        )
        return EXIT_PARITY
    if args.plot:
        for path in plot(record, Path(args.plot)):
            print(f"plot: {path}", flush=True)
    return _status(record, args)
