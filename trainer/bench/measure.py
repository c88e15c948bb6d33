"""What `operant bench` measures: env-only steps/s, training runs, the rollout alone, and
this machine's compute bound for a config, each as plain dicts that become the JSON record.

Everything heavy (torch, Gymnasium, the trainer) is imported inside the functions that use it,
so parsing the command line and refusing bad input stay fast.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

from operant.trainer.bench import env_checks


def cpu_name() -> str:
    """The CPU's model name and widest SIMD extension ("AMD EPYC (AVX-512)"): every figure
    names its machine, since the machines these benchmarks run on change between sessions."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    simd = (
        "AVX-512"
        if "avx512f" in flags
        else "AVX2"
        if "avx2" in flags
        else "SSE only"
        if flags
        else ""
    )
    return f"{model} ({simd})" if simd else model


def machine() -> dict[str, Any]:
    import numpy
    import torch

    return {
        "host": platform.node(),
        "cpu": cpu_name(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }


def summarize(values: list[float]) -> dict[str, Any]:
    median = statistics.median(values)
    cv = statistics.pstdev(values) / statistics.mean(values) if len(values) > 1 else 0.0
    return {"rounds": [round(v, 1) for v in values], "median": round(median, 1), "cv": round(cv, 4)}


def _timed_rounds(
    step: Callable[[], object],
    steps_per_call: int,
    rounds: int,
    round_seconds: float,
    warm: int = 3,
    on_measure: Callable[[], object] | None = None,
) -> list[float]:
    """Calibrate calls per round on a warm-up, then time `rounds` rounds; steps/s each.
    `on_measure` is called once between the calibration and the measured rounds."""
    for _ in range(warm):
        step()
    started = time.perf_counter()
    calls = 0
    while time.perf_counter() - started < 0.1:
        step()
        calls += 1
    per_call = (time.perf_counter() - started) / calls
    calls = max(1, int(round_seconds / per_call))
    if on_measure is not None:
        on_measure()
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
    from operant.envs.face.parity import random_actions

    impls = [part for part in args.impl.split(",") if part]
    record: dict[str, Any] = {}
    if args.validate:
        record["validation"] = env_checks.validate(
            args.env, impls, max(args.num_envs), args.validate_steps
        )
        if not all(report["ok"] for report in record["validation"]):
            return record
    profiling = env_checks.profile_kwargs(args.env, args.profile)
    if env_checks.has_own_family(args.env) and not args.no_gymnasium:
        print(f"{args.env} has no Gymnasium env to compare with: --no-gymnasium implied")
    _check_env_memory(args.env, impls, max(args.num_envs))
    results: list[dict[str, Any]] = []
    before = _rss_mb()
    for num_envs in args.num_envs:
        row: dict[str, Any] = {"num_envs": num_envs}
        rng = np.random.default_rng(0)
        for impl in impls:
            env = make_env(args.env, num_envs, impl=impl, copy=False, **profiling)
            env.reset(seed=0)
            env.actions[:] = _on_device(random_actions(env, rng), env.actions)
            row[impl] = summarize(_measured_rounds(env, args, row if profiling else None))
            env.close()
        if not (args.no_gymnasium or env_checks.has_own_family(args.env)):
            # Gymnasium's own vector env for the id (CartPole's), else its SyncVectorEnv
            # (Pendulum, Acrobot, MountainCar have none: the make_vec call was a traceback)
            has_own = gymnasium.spec(args.env).vector_entry_point is not None
            reference = gymnasium.make_vec(
                args.env,
                num_envs=num_envs,
                vectorization_mode="vector_entry_point" if has_own else "sync",
            )
            reference.reset(seed=0)
            actions = random_actions(reference, rng)

            # Defaults bind this iteration's env and actions (a closure sees the loop's latest).
            def step(vector_env=reference, batch=actions):
                return vector_env.step(batch)

            row["gymnasium"] = summarize(
                _timed_rounds(step, num_envs, args.rounds, args.round_seconds)
            )
            reference.close()
            for impl in impls:
                row[f"{impl}_vs_gymnasium"] = round(
                    row[impl]["median"] / row["gymnasium"]["median"], 2
                )
        results.append(row)
        _print_env_row(args.env, impls, row)
    record["results"] = results
    record["mem_delta_mb"] = round(_rss_mb() - before, 2)
    return record


def _on_device(actions: Any, like: Any) -> Any:
    """A numpy batch of actions as `like` holds them: a torch env's actions are a tensor."""
    import numpy as np

    if isinstance(like, np.ndarray):
        return actions
    import torch

    return torch.as_tensor(actions, device=like.device, dtype=like.dtype)


def _measured_rounds(env, args: argparse.Namespace, row: dict[str, Any] | None) -> list[float]:
    """Steps/s per round; with a `row` (--profile) also the env's per-phase timings over
    exactly the measured rounds, stored in it as "profile"."""
    from operant.envs.contract import ProfilesStep

    num_envs = env.num_envs
    if row is None:
        return _timed_rounds(env.step_bound, num_envs, args.rounds, args.round_seconds)
    if not isinstance(env, ProfilesStep):  # (env_checks.profile_kwargs refused it before)
        raise ValueError(f"--profile: {args.env} has no per-phase step timing")
    start: dict[str, int] = {}
    steps = [0]

    def step():
        steps[0] += 1
        return env.step_bound()

    def mark_start():
        start.update(env.step_timing)
        steps[0] = 0

    rates = _timed_rounds(step, num_envs, args.rounds, args.round_seconds, on_measure=mark_start)
    row["profile"] = env_checks.phase_profile(start, env.step_timing, steps[0])
    env_checks.print_profile(args.env, row["num_envs"], row["profile"])
    return rates


def _check_env_memory(env_id: str, impls: list[str], num_envs: int) -> None:
    """Refuse (ConfigError, one line) a --num-envs whose env buffers do not fit in memory."""
    from operant.envs import resolve_impl
    from operant.trainer.config import load_config
    from operant.trainer.run import memory, preflight

    config = load_config(None, [f"env.num_envs={num_envs}"], {"env": {"id": env_id}})
    for impl in impls:
        resolved = resolve_impl(env_id, impl)
        shape = preflight.probe_env(config, resolved)
        needed = (
            memory.estimate(
                config,
                resolved,
                shape.obs_spec,
                shape.act_spec,
                shape.agents_per_env,
                shape.env_bytes,
            ).envs
            + memory.runtime_bytes()
        )
        free, source = memory.available()
        if needed > free:
            raise preflight.UnavailableError(
                f"--num-envs {num_envs:,} of {env_id} ({resolved}) needs about "
                f"{memory.size_text(needed)} of memory, and {memory.size_text(free)} is "
                f"{source}; measure fewer envs"
            )


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
    axes = {
        "num_envs": args.num_envs,
        "num_steps": args.num_steps,
        "num_minibatches": args.minibatches,
    }
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


def _run_label(config: Any, cell: dict[str, Any]) -> str:
    """What a printed result is of: the env, and the cell where a matrix sets one."""
    return config.env.id + (f" {_label(cell)}" if cell else "")


def _short_label(cell: dict[str, Any]) -> str:
    """A cell for a plot axis: N (num_envs), T (num_steps), mb (num_minibatches)."""
    short = {"num_envs": "N", "num_steps": "T", "num_minibatches": "mb"}
    return " ".join(f"{short[name]}={value}" for name, value in cell.items()) or "config"


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _load_cell_config(
    args: argparse.Namespace, cell: dict[str, int], seed: int, target: bool = True
):
    from operant.envs import resolve_impl
    from operant.trainer.config import derive, load_config
    from operant.trainer.run import preflight

    overrides = [f"train.seed={seed}", *_cell_overrides(cell)]
    if args.env is not None:
        overrides.append(f"env.id={args.env}")
    if target and args.target_return is not None:
        overrides.append(f"train.target_return={args.target_return}")
    if args.total_steps:
        overrides.append(f"train.total_steps={args.total_steps}")
    config = load_config(args.config, [*overrides, *args.overrides])
    if target and config.train.target_return is None:
        from operant.trainer.services.best import env_target

        # A run stops at what operant-train calls solved (a set target ends training early).
        config.train.target_return = env_target(config)
    derive(config)  # refuse a bad combination (minibatches not dividing the batch) up front
    # ...and what this machine lacks for it (device, the env's packages, memory).
    preflight.check(config, resolve_impl(config.env.id, config.env.impl))
    return config


def _train_once(args: argparse.Namespace, cell: dict[str, int], seed: int) -> dict[str, Any]:
    """One training run; the phase seconds summed over every update, resident memory after
    --warmup updates and at the end."""
    from operant.shared.record import PHASES, UpdateRecord
    from operant.trainer.loop.train import Trainer

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
    assert last is not None, "a bench run trains at least one update"
    run: dict[str, Any] = {
        "seed": seed,
        "env_id": trainer.config.env.id,
        "global_step": last.global_step,
        "updates": last.updates,
        "wall_s": round(wall, 3),
        "sps_mean": last.sps_mean,
        "solved_at_s": trainer.solved_at,
        "final_return_mean": last.episode_return_mean,
        "phase_s": {name: round(value, 4) for name, value in phases.items()},
        "mem_delta_mb": (
            round(memory["end_mb"] - memory["after_warmup_mb"], 2)
            if "after_warmup_mb" in memory
            else None
        ),
    }
    solved = f"solved at {trainer.solved_at:.2f}s" if trainer.solved_at else "NOT solved"
    if trainer.config.train.target_return is None:
        solved = "no target return"
    final = run["final_return_mean"]
    returns = f"last-100 mean {round(final, 1)}" if final is not None else "no episode finished"
    print(
        f"  seed {seed}: {run['global_step']:,} steps, {run['sps_mean']:,.0f} steps/s, {solved}, "
        f"{returns}",
        flush=True,
    )
    return run


def _trainer_after_one_rollout(config) -> Any:
    """The run's own policy, optimizer and storage, filled by one real rollout and its GAE."""
    from operant.trainer.loop.ppo import compute_gae
    from operant.trainer.loop.train import Trainer

    trainer = Trainer(config)
    next_value = trainer.collect()
    trainer.env.close()
    ppo, storage = config.ppo, trainer.storage
    compute_gae(
        storage.rewards,
        storage.values,
        storage.dones,
        next_value,
        ppo.gamma,
        ppo.gae_lambda,
        advantages=storage.advantages,
        returns=storage.returns,
    )
    return trainer


def compute_bound(config, seconds: float = 1.0) -> dict[str, Any]:
    """This machine's ceiling for `config`'s network and epochs, measured now: policy forward
    (act, at the rollout's batch of num_envs) and PPO update (every epoch of loss, backward,
    clip, Adam at the minibatch size, per sample per epoch) samples/s, and the steps/s they
    allow together:
    1 / (1/forward + epochs/train_step). Env stepping, GAE and bookkeeping count as free.
    `seconds` is the measuring time of each of the two rates."""
    import msgspec
    import torch

    from operant.trainer.loop.ppo import ppo_update, update_path

    trainer = _trainer_after_one_rollout(config)
    ppo, derived, storage = config.ppo, trainer.derived, trainer.storage
    # The trainer's own two: sampling draws on the policy's device, minibatch orders on the CPU.
    generator, cpu_generator = trainer.generator, trainer.cpu_generator

    # On a GPU each call waits for its kernels, as the trainer does when it copies the
    # actions to the host each step (else the rounds would time the launches alone).
    finish = torch.cuda.synchronize if trainer.device.type == "cuda" else None

    def rate(work: Callable[[], None], samples: int) -> float:
        """The best of 5 rounds (a ceiling: this VM's speed drifts by 20-30% within
        seconds), after warm-up calls that make the buffers the work allocates."""

        def call() -> None:
            work()
            if finish is not None:
                finish()

        return max(_timed_rounds(call, samples, 5, seconds / 5))

    obs, out = storage.obs[0], (storage.actions[0], storage.logprobs[0], storage.values[0])

    def forward() -> None:
        with torch.inference_mode():
            trainer.policy.act(obs, generator, out=out)

    flat_batch = storage.flat()
    # Every epoch, exactly as training runs them (statistics on the last one only), with no
    # KL early stop so the epochs are all paid for: train samples/s is batch x epochs / time.
    epochs = ppo.update_epochs
    all_epochs = msgspec.structs.replace(ppo, target_kl=None)

    path = update_path(
        trainer.policy,
        trainer.flat,
        trainer.optimizer,
        all_epochs,
        derived.minibatch_size,
        trainer.device,
        native=trainer.native,
    )

    def train_update() -> None:
        ppo_update(path, flat_batch, cpu_generator)

    forward_sps = rate(forward, obs.shape[0])  # rows: a grid world's agents each a sample
    train_sps = rate(train_update, derived.batch_size * epochs)
    bound = 1.0 / (1.0 / forward_sps + epochs / train_sps)
    return {
        "forward_samples_per_s": round(forward_sps, 1),
        "train_samples_per_s": round(train_sps, 1),
        "epochs": epochs,
        "bound_steps_per_s": round(bound, 1),
    }


def arithmetic_bound(config, seconds: float = 0.02) -> dict[str, Any] | None:
    """The config's arithmetic bound (operant.trainer.bench.arithmetic): its policy's FLOPs at
    the rates this CPU's arithmetic reaches for their shapes; None for a policy it cannot
    count or a policy on a GPU (a CPU's rates say nothing of it). `seconds`: the length of
    each timed call of its rate loops."""
    from operant.trainer.bench.arithmetic import arithmetic_bound as bound
    from operant.trainer.loop.train import Trainer

    if not config.train.device.startswith("cpu"):
        return None

    trainer = Trainer(config)
    trainer.env.close()
    return bound(config, trainer.policy, trainer.derived.minibatch_size, seconds)


def _better_arithmetic_bound(
    first: dict[str, Any] | None, second: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Of two arithmetic bounds, the higher (a ceiling should not depend on which second of a
    drifting VM it was measured in)."""
    if first is None or second is None:
        return first or second
    return max(first, second, key=lambda bound: bound["bound_steps_per_s"])


def _better_bound(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two compute_bound measurements as one: the higher of each rate, the bound they allow."""
    forward = max(first["forward_samples_per_s"], second["forward_samples_per_s"])
    train = max(first["train_samples_per_s"], second["train_samples_per_s"])
    epochs = first["epochs"]
    return {
        "forward_samples_per_s": forward,
        "train_samples_per_s": train,
        "epochs": epochs,
        "bound_steps_per_s": round(1.0 / (1.0 / forward + epochs / train), 1),
    }


def _cell_configs(args: argparse.Namespace, target: bool) -> list[tuple[dict[str, int], Any]]:
    """Every cell with its config (first seed), all loaded before anything runs, so a bad
    cell is refused up front rather than after minutes of measuring."""
    return [
        (cell, _load_cell_config(args, cell, args.seeds[0], target=target)) for cell in _cells(args)
    ]


def bench_trainer(args: argparse.Namespace) -> dict[str, Any]:
    results = []
    for cell, config in _cell_configs(args, target=True):
        print(f"trainer {_run_label(config, cell)}:", flush=True)
        # The bound is measured before and after the runs and the better of each rate kept:
        # a ceiling should not depend on which second of a drifting VM it was taken in.
        bound_before = None if args.no_bound else compute_bound(config)
        arithmetic_before = None if args.no_bound else arithmetic_bound(config, args.bound_seconds)
        runs = [_train_once(args, cell, seed) for seed in args.seeds]
        sps = summarize([run["sps_mean"] for run in runs])
        solve_times = [run["solved_at_s"] for run in runs if run["solved_at_s"] is not None]
        phases = {
            name: round(sum(run["phase_s"][name] for run in runs) / len(runs), 4)
            for name in runs[0]["phase_s"]
        }
        deltas = [run["mem_delta_mb"] for run in runs if run["mem_delta_mb"] is not None]
        target = config.train.target_return
        summary = {
            "sps": sps,
            "target_return": target,
            "solved": f"{len(solve_times)}/{len(runs)}" if target is not None else "no target",
            # (with no target there is nothing to solve: every cell may be the best)
            "all_solved": len(solve_times) == len(runs) or target is None,
            "solve_s_median": round(statistics.median(solve_times), 3) if solve_times else None,
            "solve_s_max": round(max(solve_times), 3) if solve_times else None,
            "phase_s_mean": phases,
            "mem_delta_mb_max": max(deltas) if deltas else None,
        }
        result = {"cell": cell, "runs": runs, "summary": summary}
        if bound_before is not None:
            bound = _better_bound(bound_before, compute_bound(config))
            bound["fraction"] = round(sps["median"] / bound["bound_steps_per_s"], 3)
            result["bound"] = bound
            arithmetic = _better_arithmetic_bound(
                arithmetic_before, arithmetic_bound(config, args.bound_seconds)
            )
            if arithmetic is not None:
                arithmetic["fraction"] = round(sps["median"] / arithmetic["bound_steps_per_s"], 3)
                result["arithmetic_bound"] = arithmetic
        results.append(result)
        _print_trainer_summary(result)
    return _with_best(results, need_solved=True, max_cv=args.max_cv)


def _print_trainer_summary(result: dict[str, Any]) -> None:
    summary = result["summary"]
    sps = summary["sps"]
    text = f"  median {sps['median']:,.0f} steps/s (cv {sps['cv']:.1%}); " + (
        f"solved {summary['solved']}" if summary.get("target_return") is not None else "no target"
    )
    if summary["solve_s_median"] is not None:
        text += f", median {summary['solve_s_median']}s, worst {summary['solve_s_max']}s"
    if "bound" in result:
        bound = result["bound"]
        text += (
            f"; bound {bound['bound_steps_per_s']:,.0f} steps/s (forward "
            f"{bound['forward_samples_per_s']:,.0f}/s, train step "
            f"{bound['train_samples_per_s']:,.0f}/s x {bound['epochs']} epochs): "
            f"{bound['fraction']:.0%} of it"
        )
    if "arithmetic_bound" in result:
        arithmetic = result["arithmetic_bound"]
        text += (
            f"\n  arithmetic bound {arithmetic['bound_steps_per_s']:,.0f} steps/s (forward "
            f"{arithmetic['forward_flops_per_sample']:,.0f} FLOPs/sample at "
            f"{arithmetic['forward_gflops']} GFLOP/s, train step "
            f"{arithmetic['train_flops_per_sample']:,.0f} FLOPs/sample at "
            f"{arithmetic['train_gflops']} GFLOP/s x {arithmetic['epochs']} epochs): "
            f"{arithmetic['fraction']:.1%} of it"
        )
    print(text, flush=True)


def bench_trainer_eval(args: argparse.Namespace) -> dict[str, Any]:
    """The rollout alone: --rounds timed rounds of `Trainer.collect()` after --warmup."""
    from operant.trainer.loop.train import Trainer

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
        summary = {
            "sps": summarize(rounds),
            "phase_fraction": phases,
            "all_solved": True,
            "mem_delta_mb_max": round(_rss_mb() - before, 2),
        }
        result: dict[str, Any] = {"cell": cell, "summary": summary}
        results.append(result)
        sps = result["summary"]["sps"]
        print(
            f"trainer_eval {_run_label(config, cell)}: median {sps['median']:,.0f} steps/s "
            f"(cv {sps['cv']:.1%}); " + ", ".join(f"{k} {v:.0%}" for k, v in phases.items()),
            flush=True,
        )
    return _with_best(results, need_solved=False, max_cv=args.max_cv)


def _with_best(results: list[dict[str, Any]], need_solved: bool, max_cv: float) -> dict[str, Any]:
    """The record's cells, and the best stable one (highest median steps/s among those with
    a CV within bounds and, for training, every seed solved) as its summary."""
    record: dict[str, Any] = {"cells": results}
    stable = [
        result
        for result in results
        if result["summary"]["sps"]["cv"] <= max_cv
        and (result["summary"]["all_solved"] or not need_solved)
    ]
    pool = stable or results
    best = max(pool, key=lambda result: result["summary"]["sps"]["median"])
    record["best"] = {"cell": best["cell"], "stable": bool(stable)}
    record["summary"] = best["summary"]
    if "bound" in best:
        record["bound"] = best["bound"]
    if "arithmetic_bound" in best:
        record["arithmetic_bound"] = best["arithmetic_bound"]
    if len(results) > 1:
        print(
            f"best {'stable ' if stable else '(none stable) '}configuration: "
            f"{_label(best['cell'])}: "
            f"{best['summary']['sps']['median']:,.0f} steps/s",
            flush=True,
        )
    return record
