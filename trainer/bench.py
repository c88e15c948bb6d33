"""`operant bench`: throughput, measured the same way every time.

Modes:
  env_only      env steps/s of one env id per implementation and num_envs, next to
                Gymnasium's own vectorised env measured in the same run (ratio printed);
                --validate first steps every implementation beside Gymnasium's env and
                compares (operant.envs.parity);
  trainer       end-to-end PPO training: steps/s and wall-clock seconds to reach a target
                mean return over the last 100 episodes, per seed, with the time per phase and
                this machine's compute bound for the same network and epochs;
  trainer_eval  the rollout alone (policy forward + sampling + env + storage, no update):
                what acting costs, per round.

--matrix sweeps --num-envs x --num-steps x --minibatches (trainer modes) and reports the
best stable configuration. Every result is one JSON record (config, versions, machine,
per-round numbers, median and coefficient of variation, phase breakdown, memory growth)
printed and, with --output, written to a file; --baseline FILE... prints this run's medians
as ratios to earlier records of the same mode; --plot DIR draws the PNGs docs/performance.md
shows. Exit codes: 0 ok; 1 a measurement was unstable (CV above --max-cv), below an enforced
--target-sps, or grew memory by more than --max-mem-delta after warm-up; 2 bad input, or a
--validate parity mismatch. A benchmark never runs inside the test suite.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from operant.shared import atomic

EXIT_OK, EXIT_UNSTABLE, EXIT_USAGE = 0, 1, 2
EXIT_PARITY = 2  # a --validate mismatch: the numbers would be for the wrong dynamics
MODES = ("env_only", "trainer", "trainer_eval")
ENV_ONLY_NUM_ENVS = [256, 4096, 16384]


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
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("--env", default="CartPole-v1", help="env id")
    parser.add_argument("--impl", default="native", help="comma-separated impls (env_only)")
    parser.add_argument("--num-envs", type=_int_list,
                        help="comma-separated env counts (env_only: default 256,4096,16384; "
                             "trainer modes: the config's, several only with --matrix)")
    parser.add_argument("--num-steps", type=_int_list,
                        help="trainer modes: rollout steps per env (ppo.num_steps)")
    parser.add_argument("--minibatches", type=_int_list,
                        help="trainer modes: minibatches per epoch (ppo.num_minibatches)")
    parser.add_argument("--matrix", action="store_true",
                        help="trainer modes: sweep num-envs x num-steps x minibatches and report "
                             "the best stable configuration")
    parser.add_argument("--warmup", type=int, default=2,
                        help="trainer modes: updates (trainer) or rollouts (trainer_eval) before "
                             "memory is baselined and rounds are timed")
    parser.add_argument("--total-steps", type=int,
                        help="trainer: env steps per run (train.total_steps)")
    parser.add_argument("--validate", action="store_true",
                        help="env_only: step each impl beside Gymnasium's env first and exit 2 "
                             "on any disagreement")
    parser.add_argument("--validate-steps", type=int, default=200,
                        help="env_only: steps of the --validate shadow run")
    parser.add_argument("--max-mem-delta", type=float, metavar="MB",
                        help="exit 1 if resident memory grows by more than this after warm-up")
    parser.add_argument("--no-bound", action="store_true",
                        help="trainer: skip measuring the compute bound")
    parser.add_argument("--plot", metavar="DIR",
                        help="write PNG plots (SPS vs num_envs, phase breakdown) into DIR")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (median reported)")
    parser.add_argument("--round-seconds", type=float, default=0.5,
                        help="approximate length of one env_only round")
    parser.add_argument("--no-gymnasium", action="store_true",
                        help="env_only: skip Gymnasium's vectorised env")
    parser.add_argument("--seeds", type=_int_list, default=[1, 2, 3],
                        help="trainer: comma-separated seeds, one run each (a round)")
    parser.add_argument("--target-return", type=float, default=475.0,
                        help="trainer: stop a run once the last-100 mean return reaches this")
    parser.add_argument("--config", help="trainer modes: TOML config")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="trainer modes: config override section.key=value")
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
                  round_seconds: float, warm: int = 3) -> list[float]:
    """Calibrate calls per round on a warm-up, then time `rounds` rounds; steps/s each."""
    for _ in range(warm):
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

    from operant.envs import make_env
    from operant.envs.parity import random_actions

    impls = [part for part in args.impl.split(",") if part]
    record: dict[str, Any] = {}
    if args.validate:
        from operant.envs.parity import shadow_check

        shadow_envs = min(max(args.num_envs), 1024)
        reports = [shadow_check(args.env, impl, shadow_envs, args.validate_steps) for impl in impls]
        record["validation"] = [report.as_dict() for report in reports]
        for report in reports:
            verdict = "matches Gymnasium" if report.ok else f"MISMATCH: {report.mismatch}"
            print(f"validate {args.env} {report.impl}: {report.compared:,} env-steps, "
                  f"{report.episodes_ended:,} episodes ended: {verdict}", flush=True)
        if not all(report.ok for report in reports):
            return record
    _check_env_memory(args.env, impls, max(args.num_envs))
    results: list[dict[str, Any]] = []
    before = _rss_mb()
    for num_envs in args.num_envs:
        row: dict[str, Any] = {"num_envs": num_envs}
        rng = np.random.default_rng(0)
        for impl in impls:
            env = make_env(args.env, num_envs, impl=impl, copy=False)
            env.reset(seed=0)
            env.actions[:] = random_actions(env, rng)
            row[impl] = summarize(_timed_rounds(env.step_bound, num_envs, args.rounds,
                                                args.round_seconds))
            env.close()
        if not args.no_gymnasium:
            reference = gymnasium.make_vec(args.env, num_envs=num_envs,
                                           vectorization_mode="vector_entry_point")
            reference.reset(seed=0)
            actions = random_actions(reference, rng)
            row["gymnasium"] = summarize(_timed_rounds(lambda: reference.step(actions), num_envs,
                                                       args.rounds, args.round_seconds))
            reference.close()
            for impl in impls:
                row[f"{impl}_vs_gymnasium"] = round(row[impl]["median"] / row["gymnasium"]["median"], 2)
        results.append(row)
        _print_env_row(args.env, impls, row)
    record["results"] = results
    record["mem_delta_mb"] = round(_rss_mb() - before, 2)
    return record


def _check_env_memory(env_id: str, impls: list[str], num_envs: int) -> None:
    """Refuse (ConfigError, one line) a --num-envs whose env buffers do not fit in memory."""
    from operant.envs import resolve_impl
    from operant.trainer import memory, preflight
    from operant.trainer.config import load_config

    config = load_config(None, [f"env.num_envs={num_envs}"], {"env": {"id": env_id}})
    for impl in impls:
        resolved = resolve_impl(env_id, impl)
        shape = preflight.probe_env(env_id, resolved)
        needed = memory.estimate(config, resolved, shape.obs_spec, shape.act_spec,
                                 shape.agents_per_env).envs + memory.runtime_bytes()
        free, source = memory.available()
        if needed > free:
            raise preflight.UnavailableError(
                f"--num-envs {num_envs:,} of {env_id} ({resolved}) needs about "
                f"{memory.size_text(needed)} of memory, and {memory.size_text(free)} is "
                f"{source}; measure fewer envs")


def _print_env_row(env_id: str, impls: list[str], row: dict[str, Any]) -> None:
    parts = [f"{env_id} N={row['num_envs']:>6}"]
    for impl in impls:
        parts.append(f"{impl} {row[impl]['median'] / 1e6:8.2f}M/s (cv {row[impl]['cv']:.1%})")
    if "gymnasium" in row:
        parts.append(f"gymnasium {row['gymnasium']['median'] / 1e6:7.2f}M/s")
        parts += [f"{impl}/gym {row[f'{impl}_vs_gymnasium']:.1f}x" for impl in impls]
    print("  ".join(parts), flush=True)


def _cells(args: argparse.Namespace) -> list[dict[str, int]]:
    """The configurations to measure: one (the config's, with any single-valued overrides),
    or with --matrix the product of the given lists."""
    axes = {"num_envs": args.num_envs, "num_steps": args.num_steps,
            "num_minibatches": args.minibatches}
    given = {name: values for name, values in axes.items() if values}
    if not args.matrix:
        many = [name for name, values in given.items() if len(values) > 1]
        if many:
            raise ValueError(f"several values for {', '.join(many)} need --matrix")
        return [{name: values[0] for name, values in given.items()}]
    if not given:
        raise ValueError("--matrix needs --num-envs, --num-steps and/or --minibatches lists")
    names = list(given)
    return [dict(zip(names, combo)) for combo in itertools.product(*given.values())]


def _cell_overrides(cell: dict[str, int]) -> list[str]:
    sections = {"num_envs": "env", "num_steps": "ppo", "num_minibatches": "ppo"}
    return [f"{sections[name]}.{name}={value}" for name, value in cell.items()]


def _label(cell: dict[str, Any]) -> str:
    return " ".join(f"{name}={value}" for name, value in cell.items()) or "config"


def _short_label(cell: dict[str, Any]) -> str:
    """A cell for a plot axis: N (num_envs), T (num_steps), mb (num_minibatches)."""
    short = {"num_envs": "N", "num_steps": "T", "num_minibatches": "mb"}
    return " ".join(f"{short[name]}={value}" for name, value in cell.items()) or "config"


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _load_cell_config(args: argparse.Namespace, cell: dict[str, int], seed: int,
                      target: bool = True):
    from operant.envs import resolve_impl
    from operant.trainer import preflight
    from operant.trainer.config import derive, load_config

    overrides = [f"train.seed={seed}", *_cell_overrides(cell)]
    if target:
        overrides.append(f"train.target_return={args.target_return}")
    if args.total_steps:
        overrides.append(f"train.total_steps={args.total_steps}")
    config = load_config(args.config, [*overrides, *args.overrides])
    derive(config)  # refuse a bad combination (minibatches not dividing the batch) up front
    # ...and what this machine lacks for it (device, the env's packages, memory).
    preflight.check(config, resolve_impl(config.env.id, config.env.impl))
    return config


def _train_once(args: argparse.Namespace, cell: dict[str, int], seed: int) -> dict[str, Any]:
    """One training run; the phase seconds summed over every update, resident memory after
    --warmup updates and at the end."""
    from operant.shared.record import PHASES, UpdateRecord
    from operant.trainer.train import Trainer

    phases = dict.fromkeys(PHASES, 0.0)
    memory: dict[str, float] = {}

    def log(record: UpdateRecord) -> None:
        for name, seconds in record.phase_s.items():
            phases[name] += seconds
        if record.updates == args.warmup:
            memory["after_warmup_mb"] = _rss_mb()

    trainer = Trainer(_load_cell_config(args, cell, seed), log=log)
    started = time.perf_counter()
    last = trainer.run()
    wall = time.perf_counter() - started
    memory["end_mb"] = _rss_mb()
    run = {"seed": seed, "global_step": last.global_step, "updates": last.updates,
           "wall_s": round(wall, 3), "sps_mean": last.sps_mean,
           "solved_at_s": trainer.solved_at, "final_return_mean": last.episode_return_mean,
           "phase_s": {name: round(value, 4) for name, value in phases.items()},
           "mem_delta_mb": (round(memory["end_mb"] - memory["after_warmup_mb"], 2)
                            if "after_warmup_mb" in memory else None)}
    solved = f"solved at {trainer.solved_at:.2f}s" if trainer.solved_at else "NOT solved"
    final = run["final_return_mean"]
    print(f"  seed {seed}: {run['global_step']:,} steps, {run['sps_mean']:,.0f} steps/s, {solved}, "
          f"last-100 mean {final if final is None else round(final, 1)}", flush=True)
    return run


def compute_bound(config, seconds: float = 1.0) -> dict[str, Any]:
    """This machine's ceiling for `config`'s network and epochs, measured now: policy forward
    (act, at the rollout's batch of num_envs) and PPO update (every epoch of loss, backward,
    clip, Adam at the minibatch size, per sample per epoch) samples/s, and the steps/s they
    allow together:
    1 / (1/forward + epochs/train_step). Env stepping, GAE and bookkeeping count as free.
    `seconds` is the measuring time of each of the two rates."""
    import msgspec
    import torch

    from operant.trainer.ppo import compute_gae, ppo_update
    from operant.trainer.train import Trainer

    # The run's own policy, optimizer and rollout storage, filled by one real rollout.
    trainer = Trainer(config)
    next_value = trainer.collect()
    trainer.env.close()
    ppo, derived, storage = config.ppo, trainer.derived, trainer.storage
    compute_gae(storage.rewards, storage.values, storage.dones, next_value, ppo.gamma,
                ppo.gae_lambda, advantages=storage.advantages, returns=storage.returns)
    generator = torch.Generator().manual_seed(0)

    def rate(work: Callable[[], None], samples: int) -> float:
        """The best of 5 rounds (a ceiling: this VM's speed drifts by 20-30% within
        seconds), after warm-up calls that make the buffers the work allocates."""
        return max(_timed_rounds(work, samples, 5, seconds / 5))

    obs, out = storage.obs[0], (storage.actions[0], storage.logprobs[0], storage.values[0])

    def forward() -> None:
        with torch.inference_mode():
            trainer.policy.act(obs, generator, out=out)

    flat_batch = storage.flat()
    # Every epoch, exactly as training runs them (statistics on the last one only), with no
    # KL early stop so the epochs are all paid for: train samples/s is batch x epochs / time.
    epochs = ppo.update_epochs
    all_epochs = msgspec.structs.replace(ppo, target_kl=None)

    def train_update() -> None:
        ppo_update(trainer.policy, trainer.flat, trainer.optimizer, all_epochs, **flat_batch,
                   minibatch_size=derived.minibatch_size, generator=generator)

    forward_sps = rate(forward, config.env.num_envs)
    train_sps = rate(train_update, derived.batch_size * epochs)
    bound = 1.0 / (1.0 / forward_sps + epochs / train_sps)
    return {"forward_samples_per_s": round(forward_sps, 1),
            "train_samples_per_s": round(train_sps, 1), "epochs": epochs,
            "bound_steps_per_s": round(bound, 1)}


def _better_bound(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two compute_bound measurements as one: the higher of each rate, the bound they allow."""
    forward = max(first["forward_samples_per_s"], second["forward_samples_per_s"])
    train = max(first["train_samples_per_s"], second["train_samples_per_s"])
    epochs = first["epochs"]
    return {"forward_samples_per_s": forward, "train_samples_per_s": train, "epochs": epochs,
            "bound_steps_per_s": round(1.0 / (1.0 / forward + epochs / train), 1)}


def _cell_configs(args: argparse.Namespace, target: bool) -> list[tuple[dict[str, int], Any]]:
    """Every cell with its config (first seed), all loaded before anything runs, so a bad
    cell is refused up front rather than after minutes of measuring."""
    return [(cell, _load_cell_config(args, cell, args.seeds[0], target=target))
            for cell in _cells(args)]


def bench_trainer(args: argparse.Namespace) -> dict[str, Any]:
    results = []
    for cell, config in _cell_configs(args, target=True):
        print(f"trainer {_label(cell)}:", flush=True)
        # The bound is measured before and after the runs and the better of each rate kept:
        # a ceiling should not depend on which second of a drifting VM it was taken in.
        bound_before = None if args.no_bound else compute_bound(config)
        runs = [_train_once(args, cell, seed) for seed in args.seeds]
        sps = summarize([run["sps_mean"] for run in runs])
        solve_times = [run["solved_at_s"] for run in runs if run["solved_at_s"] is not None]
        phases = {name: round(sum(run["phase_s"][name] for run in runs) / len(runs), 4)
                  for name in runs[0]["phase_s"]}
        deltas = [run["mem_delta_mb"] for run in runs if run["mem_delta_mb"] is not None]
        summary = {"sps": sps, "solved": f"{len(solve_times)}/{len(runs)}",
                   "all_solved": len(solve_times) == len(runs),
                   "solve_s_median": round(statistics.median(solve_times), 3) if solve_times else None,
                   "solve_s_max": round(max(solve_times), 3) if solve_times else None,
                   "phase_s_mean": phases,
                   "mem_delta_mb_max": max(deltas) if deltas else None}
        result = {"cell": cell, "runs": runs, "summary": summary}
        if bound_before is not None:
            bound = _better_bound(bound_before, compute_bound(config))
            bound["fraction"] = round(sps["median"] / bound["bound_steps_per_s"], 3)
            result["bound"] = bound
        results.append(result)
        _print_trainer_summary(result)
    return _with_best(results, need_solved=True, max_cv=args.max_cv)


def _print_trainer_summary(result: dict[str, Any]) -> None:
    summary = result["summary"]
    sps = summary["sps"]
    text = f"  median {sps['median']:,.0f} steps/s (cv {sps['cv']:.1%}); solved {summary['solved']}"
    if summary["solve_s_median"] is not None:
        text += f", median {summary['solve_s_median']}s, worst {summary['solve_s_max']}s"
    if "bound" in result:
        bound = result["bound"]
        text += (f"; bound {bound['bound_steps_per_s']:,.0f} steps/s (forward "
                 f"{bound['forward_samples_per_s']:,.0f}/s, train step "
                 f"{bound['train_samples_per_s']:,.0f}/s x {bound['epochs']} epochs): "
                 f"{bound['fraction']:.0%} of it")
    print(text, flush=True)


def bench_trainer_eval(args: argparse.Namespace) -> dict[str, Any]:
    """The rollout alone: --rounds timed rounds of `Trainer.collect()` after --warmup."""
    from operant.trainer.train import Trainer

    results = []
    for cell, config in _cell_configs(args, target=False):
        trainer = Trainer(config)
        steps = config.ppo.num_steps * config.env.num_envs
        for _ in range(args.warmup):
            trainer.collect()
        before = _rss_mb()
        trainer.timer.reset()
        rounds = _timed_rounds(trainer.collect, steps, args.rounds, args.round_seconds, warm=0)
        total = sum(trainer.timer.totals.values())
        phases = {name: round(ns / total, 4) for name, ns in trainer.timer.totals.items() if ns}
        trainer.env.close()
        result = {"cell": cell, "summary": {"sps": summarize(rounds), "phase_fraction": phases,
                                            "all_solved": True,
                                            "mem_delta_mb_max": round(_rss_mb() - before, 2)}}
        results.append(result)
        sps = result["summary"]["sps"]
        print(f"trainer_eval {_label(cell)}: median {sps['median']:,.0f} steps/s "
              f"(cv {sps['cv']:.1%}); " + ", ".join(f"{k} {v:.0%}" for k, v in phases.items()),
              flush=True)
    return _with_best(results, need_solved=False, max_cv=args.max_cv)


def _with_best(results: list[dict[str, Any]], need_solved: bool, max_cv: float) -> dict[str, Any]:
    """The record's cells, and the best stable one (highest median steps/s among those with
    a CV within bounds and, for training, every seed solved) as its summary."""
    record: dict[str, Any] = {"cells": results}
    stable = [result for result in results
              if result["summary"]["sps"]["cv"] <= max_cv
              and (result["summary"]["all_solved"] or not need_solved)]
    pool = stable or results
    best = max(pool, key=lambda result: result["summary"]["sps"]["median"])
    record["best"] = {"cell": best["cell"], "stable": bool(stable)}
    record["summary"] = best["summary"]
    if "bound" in best:
        record["bound"] = best["bound"]
    if len(results) > 1:
        print(f"best {'stable ' if stable else '(none stable) '}configuration: {_label(best['cell'])}: "
              f"{best['summary']['sps']['median']:,.0f} steps/s", flush=True)
    return record


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
    """Median steps/s by what was measured: '<mode> <cell>', or '<impl> N=<num_envs>'."""
    if record["mode"] != "env_only":
        return {f"{record['mode']} {_label(cell['cell'])}": cell["summary"]["sps"]["median"]
                for cell in record["cells"]}
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


def _usage_problem(args: argparse.Namespace) -> str | None:
    if args.rounds < 1:
        return "--rounds must be at least 1"
    if args.warmup < 0:
        return "--warmup must be 0 or more"
    if args.validate and args.mode != "env_only":
        return "--validate is an env_only option (training is validated by tests/test_learning.py)"
    if args.validate_steps < 1:
        return "--validate-steps must be at least 1"
    if args.mode == "env_only" and (args.matrix or args.num_steps or args.minibatches):
        return "--matrix, --num-steps and --minibatches are for the trainer modes"
    if args.total_steps is not None and args.total_steps < 1:
        return "--total-steps must be positive"
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return "--plot needs matplotlib: pip install 'operant-rl[bench]'"
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problem = _usage_problem(args)
    if problem:
        print(f"operant bench: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if args.mode == "env_only" and args.num_envs is None:
        args.num_envs = ENV_ONLY_NUM_ENVS
    try:
        baselines = _load_baselines(args.baseline, args.mode)
    except ValueError as error:
        print(f"operant bench: {error}", file=sys.stderr)
        return EXIT_USAGE
    from operant.trainer.config import ConfigError
    from operant.envs import EnvError

    record: dict[str, Any] = {"mode": args.mode, "args": vars(args), "machine": machine(),
                              "time": time.time()}
    run = {"env_only": bench_env_only, "trainer": bench_trainer,
           "trainer_eval": bench_trainer_eval}[args.mode]
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
        print("operant bench: --validate: the implementation disagrees with Gymnasium; "
              "nothing was measured", file=sys.stderr)
        return EXIT_PARITY
    if args.plot:
        for path in plot(record, Path(args.plot)):
            print(f"plot: {path}", flush=True)
    return _status(record, args)


def _status(record: dict[str, Any], args: argparse.Namespace) -> int:
    status = EXIT_OK
    medians = _medians(record)
    if any(cv > args.max_cv for _, cv in medians):
        print(f"operant bench: unstable: a coefficient of variation exceeds {args.max_cv:.0%}",
              file=sys.stderr)
        status = EXIT_UNSTABLE
    if args.target_sps is not None and args.enforce_target \
            and any(median < args.target_sps for median, _ in medians):
        print(f"operant bench: below the target of {args.target_sps:,.0f} steps/s", file=sys.stderr)
        status = EXIT_UNSTABLE
    if args.max_mem_delta is not None:
        grown = _mem_delta(record)
        if grown is not None and grown > args.max_mem_delta:
            print(f"operant bench: resident memory grew by {grown:.1f} MB after warm-up "
                  f"(--max-mem-delta {args.max_mem_delta:g})", file=sys.stderr)
            status = EXIT_UNSTABLE
    return status


def _mem_delta(record: dict[str, Any]) -> float | None:
    if record["mode"] == "env_only":
        return record.get("mem_delta_mb")
    deltas = [cell["summary"]["mem_delta_mb_max"] for cell in record["cells"]
              if cell["summary"]["mem_delta_mb_max"] is not None]
    return max(deltas) if deltas else None


def _medians(record: dict[str, Any]) -> list[tuple[float, float]]:
    """(median, cv) of what decides the exit status: every env_only measurement; the best
    configuration of a trainer mode (with --matrix, unstable cells are simply not chosen)."""
    if record["mode"] != "env_only":
        return [(record["summary"]["sps"]["median"], record["summary"]["sps"]["cv"])]
    impls = [part for part in record["args"]["impl"].split(",") if part]
    return [(row[impl]["median"], row[impl]["cv"]) for row in record["results"] for impl in impls]


# -- plots ---------------------------------------------------------------------------------
PHASE_COLORS = {"env": "#4c72b0", "forward": "#55a868", "store": "#c44e52", "gae": "#8172b2",
                "update": "#ccb974", "publish": "#64b5cd"}


def plot(record: dict[str, Any], directory: Path) -> list[Path]:
    """The PNGs for a record: env_only, steps/s against num_envs per implementation; trainer
    modes, the phase breakdown per configuration and, for a matrix, steps/s against
    num_envs per (num_steps, minibatches)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    machine_text = f"{record['machine']['cpus']} CPUs, torch {record['machine']['torch']}"
    if record["mode"] == "env_only":
        figure, axes = plt.subplots(figsize=(7, 4.2))
        rows = record["results"]
        impls = [part for part in record["args"]["impl"].split(",") if part]
        xs = [row["num_envs"] for row in rows]
        for impl in [*impls, "gymnasium"]:
            if all(impl in row for row in rows):
                axes.plot(xs, [row[impl]["median"] / 1e6 for row in rows], marker="o",
                          label=f"operant {impl}" if impl != "gymnasium" else
                          "Gymnasium vector env")
        axes.set_xscale("log", base=2)
        axes.set_xlabel("num_envs")
        axes.set_ylabel("env steps/s (millions), one core")
        axes.set_title(f"{record['args']['env']}: env-only throughput ({machine_text})")
        axes.grid(alpha=0.3)
        axes.legend()
        path = directory / f"env_only_{record['args']['env']}.png"
        figure.tight_layout()
        figure.savefig(path, dpi=110)
        plt.close(figure)
        return [path]
    cells = record["cells"]
    key = "phase_s_mean" if record["mode"] == "trainer" else "phase_fraction"
    figure, axes = plt.subplots(figsize=(8, 0.45 * len(cells) + 2.2))
    labels = [_short_label(cell["cell"]) for cell in cells]
    lefts = [0.0] * len(cells)
    for name, color in PHASE_COLORS.items():
        shares = []
        for cell in cells:
            phases = cell["summary"].get(key, {})
            total = sum(phases.values()) or 1.0
            shares.append(phases.get(name, 0.0) / total)
        if any(shares):
            axes.barh(labels, shares, left=lefts, color=color, label=name)
            lefts = [left + share for left, share in zip(lefts, shares)]
    axes.set_xlim(0, 1)
    axes.set_xlabel("fraction of time")
    axes.set_title(f"{record['mode']}: where the time goes\n({machine_text})", fontsize="medium")
    figure.legend(*axes.get_legend_handles_labels(), ncol=6, fontsize="small",
                  loc="lower center")
    path = directory / f"phases_{record['mode']}.png"
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)
    written.append(path)
    if len(cells) > 1 and all("num_envs" in cell["cell"] for cell in cells):
        figure, axes = plt.subplots(figsize=(7, 4.2))
        groups: dict[str, list[tuple[int, float]]] = {}
        for cell in cells:
            rest = {k: v for k, v in cell["cell"].items() if k != "num_envs"}
            groups.setdefault(_short_label(rest), []).append(
                (cell["cell"]["num_envs"], cell["summary"]["sps"]["median"] / 1e3,
                 cell["summary"]["all_solved"]))
        for label, points in groups.items():
            points.sort()
            line, = axes.plot([p[0] for p in points], [p[1] for p in points], label=label)
            for x, y, solved in points:
                axes.plot([x], [y], marker="o", color=line.get_color(),
                          markerfacecolor=line.get_color() if solved else "white")
        axes.set_xscale("log", base=2)
        axes.set_xlabel("num_envs")
        axes.set_ylabel("steps/s (thousands)")
        axes.set_title(f"{record['mode']}: steps/s by configuration\n({machine_text}"
                       + ("; hollow: not every seed solved)" if record["mode"] == "trainer"
                          else ")"), fontsize="medium")
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
        path = directory / f"matrix_{record['mode']}.png"
        figure.tight_layout()
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written


if __name__ == "__main__":
    sys.exit(main())
