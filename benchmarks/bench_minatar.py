"""Env-only throughput of the MinAtar kernels next to the `minatar` package, in one run.

For each game and each N, alternating rounds (kernel, package, kernel, package, ...):

- native: `step_bound()` of `make_env("MinAtar-<Game>-v1", N)`, the C kernel, with actions
  already in its buffer (a fresh random batch copied in before each step, from a table made
  beforehand), observations written into the uint8 (N, C, 10, 10) buffer;
- minatar: the package as its users step N envs: a Python loop over N `minatar.Environment`
  objects calling `act(a)` and `state()` (the observation), and `reset()` where one ended.

Both with MinAtar's defaults (sticky actions 0.1, difficulty ramping). A round runs whole batch
steps for at least `--round-seconds`; each figure is the median of `--rounds` rounds, and the
ratio is the median of the rounds' ratios (round k of the kernel over round k of the package).
One core: the kernel is single-threaded and so is the package's loop.

    flock /tmp/operant-bench.lock python benchmarks/bench_minatar.py --json out.json

Needs the `minatar` extra (`pip install "operant-rl[minatar]"`).
"""

from __future__ import annotations

import os

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from operant.envs import make_env  # noqa: E402
from operant.envs.minatar import GAME_IDS  # noqa: E402

ACTION_TABLE = 64


def _round(call: Callable[[], None], num_envs: int, seconds: float) -> float:
    """Env steps per second over whole calls for at least `seconds`."""
    calls = 0
    started = time.perf_counter()
    while True:
        call()
        calls += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return calls * num_envs / elapsed


def native_stepper(env_id: str, num_envs: int, seed: int) -> Callable[[], None]:
    env = make_env(env_id, num_envs, impl="native", copy=False)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    table = rng.integers(0, env.single_action_space.n, (ACTION_TABLE, num_envs))
    step = 0

    def call() -> None:
        nonlocal step
        np.copyto(env.actions, table[step % ACTION_TABLE])
        env.step_bound()
        step += 1

    return call


def minatar_stepper(game: str, num_envs: int, seed: int) -> Callable[[], None]:
    from minatar import Environment

    envs = [Environment(game) for _ in range(num_envs)]
    for i, env in enumerate(envs):
        env.seed(seed + i)
        env.reset()
    action_set = envs[0].minimal_action_set()
    rng = np.random.default_rng(seed)
    table = [
        [action_set[a] for a in row]
        for row in rng.integers(0, len(action_set), (ACTION_TABLE, num_envs)).tolist()
    ]
    step = 0

    def call() -> None:
        nonlocal step
        for env, action in zip(envs, table[step % ACTION_TABLE]):
            _, terminal = env.act(action)
            env.state()
            if terminal:
                env.reset()
        step += 1

    return call


def measure(
    env_id: str, num_envs: int, rounds: int, round_seconds: float, seed: int
) -> dict[str, Any]:
    game = GAME_IDS[env_id]
    native = native_stepper(env_id, num_envs, seed)
    package = minatar_stepper(game, num_envs, seed)
    native()
    package()
    native_rates, package_rates = [], []
    for _ in range(rounds):
        native_rates.append(_round(native, num_envs, round_seconds))
        package_rates.append(_round(package, num_envs, round_seconds))
    ratios = [a / b for a, b in zip(native_rates, package_rates)]
    return {
        "env_id": env_id,
        "num_envs": num_envs,
        "native_sps": statistics.median(native_rates),
        "minatar_sps": statistics.median(package_rates),
        "ratio": statistics.median(ratios),
        "native_rounds": native_rates,
        "minatar_rounds": package_rates,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", nargs="*", default=sorted(GAME_IDS))
    parser.add_argument("--num-envs", type=int, nargs="*", default=[1024])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--round-seconds", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the rows (and the machine) to this file")
    args = parser.parse_args(argv)
    rows = []
    print(f"{'env':28} {'N':>6} {'native steps/s':>15} {'minatar steps/s':>16} {'ratio':>7}")
    for env_id in args.env:
        for num_envs in args.num_envs:
            row = measure(env_id, num_envs, args.rounds, args.round_seconds, args.seed)
            rows.append(row)
            print(
                f"{env_id:28} {num_envs:>6} {row['native_sps']:>15,.0f} "
                f"{row['minatar_sps']:>16,.0f} {row['ratio']:>6.0f}x"
            )
    if args.json:
        record = {
            "date": datetime.date.today().isoformat(),
            "machine": platform.processor() or platform.machine(),
            "rounds": args.rounds,
            "round_seconds": args.round_seconds,
            "rows": rows,
        }
        with open(args.json, "w") as file:
            json.dump(record, file, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
