"""`operant bench`: throughput, measured the same way every time.

Modes:
  env_only  env steps/s of one env id per implementation and num_envs, next to Gymnasium's
            own vectorised env measured in the same run (ratio printed);
  trainer   end-to-end PPO training: steps/s and wall-clock seconds to reach a target mean
            return over the last 100 episodes, per seed.

Every result is one JSON record (config, versions, machine, per-round numbers, median and
coefficient of variation) printed and, with --output, written to a file; --baseline FILE...
prints this run's medians as ratios to earlier records of the same mode. Exit codes: 0 ok,
1 a measurement was unstable (CV above --max-cv) or below an enforced --target-sps, 2 bad
input. A benchmark never runs inside the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Any, Callable

EXIT_OK, EXIT_UNSTABLE, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"operant bench: {message} (see operant bench --help)\n")


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="operant bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("env_only", "trainer"))
    parser.add_argument("--env", default="CartPole-v1", help="env id")
    parser.add_argument("--impl", default="native", help="comma-separated impls (env_only)")
    parser.add_argument("--num-envs", type=_int_list, default=[256, 4096, 16384],
                        help="comma-separated env counts (env_only)")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (median reported)")
    parser.add_argument("--round-seconds", type=float, default=0.5,
                        help="approximate length of one env_only round")
    parser.add_argument("--no-gymnasium", action="store_true",
                        help="env_only: skip Gymnasium's vectorised env")
    parser.add_argument("--seeds", type=_int_list, default=[1, 2, 3],
                        help="trainer: comma-separated seeds, one run each")
    parser.add_argument("--target-return", type=float, default=475.0,
                        help="trainer: stop a run once the last-100 mean return reaches this")
    parser.add_argument("--config", help="trainer: TOML config")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="trainer: config override section.key=value")
    parser.add_argument("--max-cv", type=float, default=0.20,
                        help="coefficient of variation above which a result is unstable")
    parser.add_argument("--target-sps", type=float, help="minimum median steps/s")
    parser.add_argument("--enforce-target", action="store_true",
                        help="exit 1 when the median is below --target-sps")
    parser.add_argument("--output", help="write the JSON record here")
    parser.add_argument("--baseline", nargs="+", default=[], metavar="FILE",
                        help="earlier --output records of the same mode: print this run's "
                             "median steps/s as a ratio to each")
    return parser


def machine() -> dict[str, Any]:
    import numpy
    import torch

    return {"host": platform.node(), "cpu": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "numpy": numpy.__version__, "torch": torch.__version__,
            "torch_threads": torch.get_num_threads()}


def summarize(values: list[float]) -> dict[str, Any]:
    median = statistics.median(values)
    cv = statistics.pstdev(values) / statistics.mean(values) if len(values) > 1 else 0.0
    return {"rounds": [round(v, 1) for v in values], "median": round(median, 1), "cv": round(cv, 4)}


def _timed_rounds(step: Callable[[], None], steps_per_call: int, rounds: int,
                  round_seconds: float) -> list[float]:
    """Calibrate calls per round on a warm-up, then time `rounds` rounds; steps/s each."""
    for _ in range(3):
        step()
    started = time.perf_counter()
    calls = 0
    while time.perf_counter() - started < 0.1:
        step()
        calls += 1
    per_call = (time.perf_counter() - started) / calls
    calls = max(1, int(round_seconds / per_call))
    results = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            step()
        results.append(calls * steps_per_call / (time.perf_counter() - started))
    return results


def bench_env_only(args: argparse.Namespace) -> dict[str, Any]:
    import gymnasium
    import numpy as np

    from operant.trainer.envs import make_env

    impls = [part for part in args.impl.split(",") if part]
    results: list[dict[str, Any]] = []
    for num_envs in args.num_envs:
        row: dict[str, Any] = {"num_envs": num_envs}
        rng = np.random.default_rng(0)
        for impl in impls:
            env = make_env(args.env, num_envs, impl=impl, copy=False)
            env.reset(seed=0)
            env.actions[:] = _sample_actions(env, rng)
            row[impl] = summarize(_timed_rounds(env.step_bound, num_envs, args.rounds,
                                                args.round_seconds))
            env.close()
        if not args.no_gymnasium:
            reference = gymnasium.make_vec(args.env, num_envs=num_envs,
                                           vectorization_mode="vector_entry_point")
            reference.reset(seed=0)
            actions = _sample_actions(reference, rng)
            row["gymnasium"] = summarize(_timed_rounds(lambda: reference.step(actions), num_envs,
                                                       args.rounds, args.round_seconds))
            reference.close()
            for impl in impls:
                row[f"{impl}_vs_gymnasium"] = round(row[impl]["median"] / row["gymnasium"]["median"], 2)
        results.append(row)
        _print_env_row(args.env, impls, row)
    return {"results": results}


def _sample_actions(env, rng):
    import numpy as np
    from gymnasium import spaces

    space = env.single_action_space
    if isinstance(space, spaces.Discrete):
        return rng.integers(0, space.n, size=env.num_envs)
    return rng.uniform(space.low, space.high, size=(env.num_envs, *space.shape)).astype(np.float32)


def _print_env_row(env_id: str, impls: list[str], row: dict[str, Any]) -> None:
    parts = [f"{env_id} N={row['num_envs']:>6}"]
    for impl in impls:
        parts.append(f"{impl} {row[impl]['median'] / 1e6:8.2f}M/s (cv {row[impl]['cv']:.1%})")
    if "gymnasium" in row:
        parts.append(f"gymnasium {row['gymnasium']['median'] / 1e6:7.2f}M/s")
        parts += [f"{impl}/gym {row[f'{impl}_vs_gymnasium']:.1f}x" for impl in impls]
    print("  ".join(parts), flush=True)


def bench_trainer(args: argparse.Namespace) -> dict[str, Any]:
    from operant.trainer.config import load_config
    from operant.trainer.train import Trainer

    runs = []
    for seed in args.seeds:
        overrides = [f"train.seed={seed}", f"train.target_return={args.target_return}",
                     *args.overrides]
        config = load_config(args.config, overrides)
        trainer = Trainer(config)
        started = time.perf_counter()
        last = trainer.run()
        wall = time.perf_counter() - started
        run = {"seed": seed, "global_step": last["global_step"], "wall_s": round(wall, 3),
               "sps_mean": last["sps_mean"], "solved_at_s": trainer.solved_at,
               "final_return_mean": last["episode_return_mean"], "phase_s_last": last["phase_s"]}
        runs.append(run)
        solved = f"solved at {trainer.solved_at:.2f}s" if trainer.solved_at else "NOT solved"
        print(f"seed {seed}: {run['global_step']:,} steps, {run['sps_mean']:,.0f} steps/s, "
              f"{solved}, last-100 mean {run['final_return_mean']:.1f}", flush=True)
    sps = summarize([run["sps_mean"] for run in runs])
    solve_times = [run["solved_at_s"] for run in runs if run["solved_at_s"] is not None]
    summary = {"sps": sps, "solved": f"{len(solve_times)}/{len(runs)}",
               "solve_s_median": round(statistics.median(solve_times), 3) if solve_times else None,
               "solve_s_max": round(max(solve_times), 3) if solve_times else None}
    print(f"trainer: median {sps['median']:,.0f} steps/s (cv {sps['cv']:.1%}); solved "
          f"{summary['solved']}, median {summary['solve_s_median']}s, worst {summary['solve_s_max']}s",
          flush=True)
    return {"runs": runs, "summary": summary}


def _load_baselines(paths: list[str], mode: str) -> list[tuple[str, dict[str, Any]]]:
    """The --baseline records, refused up front (before any measuring) when unusable."""
    baselines = []
    for path in paths:
        try:
            with open(path) as handle:
                record = json.load(handle)
        except FileNotFoundError:
            raise ValueError(f"baseline {path} does not exist") from None
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"baseline {path} is not a bench JSON record ({error})") from None
        if not isinstance(record, dict) or record.get("mode") != mode:
            found = record.get("mode") if isinstance(record, dict) else None
            raise ValueError(f"baseline {path} is a {found!r} record, not {mode!r}")
        baselines.append((path, record))
    return baselines


def _comparable(record: dict[str, Any]) -> dict[str, float]:
    """Median steps/s by what was measured: 'trainer', or '<impl> N=<num_envs>'."""
    if record["mode"] == "trainer":
        return {"trainer": record["summary"]["sps"]["median"]}
    impls = [part for part in record["args"]["impl"].split(",") if part]
    return {f"{impl} N={row['num_envs']}": row[impl]["median"]
            for row in record["results"] for impl in impls if impl in row}


def compare(record: dict[str, Any], baselines: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """This run's medians over each baseline's, for every measurement both have."""
    ours = _comparable(record)
    comparisons = []
    for path, baseline in baselines:
        theirs = _comparable(baseline)
        ratios = {key: round(ours[key] / theirs[key], 3) for key in ours
                  if key in theirs and theirs[key] > 0}
        comparisons.append({"baseline": path, "ratios": ratios})
        text = ", ".join(f"{key} {ratio:.2f}x" for key, ratio in ratios.items()) or "nothing in common"
        print(f"vs {path}: {text}", flush=True)
    return comparisons


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.rounds < 1:
        print("operant bench: --rounds must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    try:
        baselines = _load_baselines(args.baseline, args.mode)
    except ValueError as error:
        print(f"operant bench: {error}", file=sys.stderr)
        return EXIT_USAGE
    from operant.trainer.config import ConfigError
    from operant.trainer.envs import EnvError

    record: dict[str, Any] = {"mode": args.mode, "args": vars(args), "machine": machine(),
                              "time": time.time()}
    try:
        record.update(bench_env_only(args) if args.mode == "env_only" else bench_trainer(args))
    except (ConfigError, EnvError) as error:
        print(f"operant bench: {error}", file=sys.stderr)
        return EXIT_USAGE
    if baselines:
        record["baselines"] = compare(record, baselines)
    text = json.dumps(record, indent=2)
    if args.output:
        with open(args.output, "w") as handle:
            handle.write(text + "\n")
    status = EXIT_OK
    medians = _medians(record)
    if any(cv > args.max_cv for _, cv in medians):
        print(f"operant bench: unstable: a coefficient of variation exceeds {args.max_cv:.0%}",
              file=sys.stderr)
        status = EXIT_UNSTABLE
    if args.target_sps is not None and args.enforce_target:
        if any(median < args.target_sps for median, _ in medians):
            print(f"operant bench: below the target of {args.target_sps:,.0f} steps/s", file=sys.stderr)
            status = EXIT_UNSTABLE
    return status


def _medians(record: dict[str, Any]) -> list[tuple[float, float]]:
    if record["mode"] == "trainer":
        return [(record["summary"]["sps"]["median"], record["summary"]["sps"]["cv"])]
    impls = [part for part in record["args"]["impl"].split(",") if part]
    return [(row[impl]["median"], row[impl]["cv"]) for row in record["results"] for impl in impls]


if __name__ == "__main__":
    sys.exit(main())
