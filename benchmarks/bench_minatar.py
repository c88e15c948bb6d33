"""Env-only throughput of the MinAtar kernels next to the `minatar` package, in one run.

For each game and each N, alternating rounds (kernel, package, kernel, package, ...):

- native: `step_bound()` of `make_env("MinAtar-<Game>-v1", N)`, the C kernel, with actions
  already in its buffer (a fresh random batch copied in before each step, from a table made
  beforehand), observations written into the uint8 (N, C, 10, 10) buffer;
- minatar: the package as its users step N envs: a Python loop over N `minatar.Environment`
  objects calling `act(a)` and `state()` (the observation), and `reset()` where one ended.

- with `--baseline-kernel FILE`: an older build of `operant.cext.minatar` (its .so, loaded
  under another name), stepped the same way, so a change to the kernels is measured before and
  after in the same run, in the same alternating rounds.

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
import importlib.util  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from operant.cext.minatar import GAMES  # noqa: E402
from operant.envs import make_env  # noqa: E402
from operant.envs.minatar.vector import GAME_IDS  # noqa: E402

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


def load_baseline(path: str) -> Any:
    """An older build of operant.cext.minatar from its shared library, as a module of its own
    (the name's last part must stay `minatar`: the library's init function is named for it)."""
    spec = importlib.util.spec_from_file_location("operant_baseline.minatar", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--baseline-kernel {path}: not a loadable extension module")
    module = importlib.util.module_from_spec(spec)
    before = dict(sys.modules)
    spec.loader.exec_module(module)
    # Cython registers the module under the name it was compiled with (`minatar`, or
    # `operant.cext.minatar` from a checkout): that entry must not hide the minatar package or
    # the current kernel
    for name, value in list(sys.modules.items()):
        if value is module:
            if name in before:
                sys.modules[name] = before[name]
            else:
                del sys.modules[name]
    return module


def baseline_stepper(module: Any, game: str, num_envs: int, seed: int) -> Callable[[], None]:
    """The baseline build's kernel with its own buffers, stepped as native_stepper steps."""
    layout = GAMES[game]
    actions = np.zeros(num_envs, np.int64)
    obs = np.zeros((num_envs, len(layout["channels"]), 10, 10), np.uint8)
    rewards = np.zeros(num_envs, np.float32)
    terminated = np.zeros(num_envs, np.bool_)
    truncated = np.zeros(num_envs, np.bool_)
    kernel = module.MinAtarKernel(
        game, num_envs, actions, obs, rewards, terminated, truncated, np.zeros_like(obs)
    )
    kernel.reset(seed)
    rng = np.random.default_rng(seed)
    table = rng.integers(0, len(kernel.action_set), (ACTION_TABLE, num_envs))
    step = 0

    def call() -> None:
        nonlocal step
        np.copyto(actions, table[step % ACTION_TABLE])
        if kernel.step() >= 0:
            raise SystemExit("the baseline kernel refused an action")
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
    env_id: str,
    num_envs: int,
    rounds: int,
    round_seconds: float,
    seed: int,
    baseline: Any = None,
) -> dict[str, Any]:
    game = GAME_IDS[env_id]
    native = native_stepper(env_id, num_envs, seed)
    package = minatar_stepper(game, num_envs, seed)
    older = None if baseline is None else baseline_stepper(baseline, game, num_envs, seed)
    native()
    package()
    if older is not None:
        older()
    native_rates, package_rates, baseline_rates = [], [], []
    for _ in range(rounds):
        native_rates.append(_round(native, num_envs, round_seconds))
        if older is not None:
            baseline_rates.append(_round(older, num_envs, round_seconds))
        package_rates.append(_round(package, num_envs, round_seconds))
    ratios = [a / b for a, b in zip(native_rates, package_rates)]
    row = {
        "env_id": env_id,
        "num_envs": num_envs,
        "native_sps": statistics.median(native_rates),
        "minatar_sps": statistics.median(package_rates),
        "ratio": statistics.median(ratios),
        "native_rounds": native_rates,
        "minatar_rounds": package_rates,
    }
    if older is not None:
        row["baseline_sps"] = statistics.median(baseline_rates)
        row["baseline_ratio"] = statistics.median(
            [a / b for a, b in zip(baseline_rates, package_rates)]
        )
        row["speedup"] = statistics.median([a / b for a, b in zip(native_rates, baseline_rates)])
        row["baseline_rounds"] = baseline_rates
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", nargs="*", default=sorted(GAME_IDS))
    parser.add_argument("--num-envs", type=int, nargs="*", default=[1024])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--round-seconds", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the rows (and the machine) to this file")
    parser.add_argument(
        "--baseline-kernel",
        metavar="FILE",
        help="an older build's operant/cext/minatar*.so, measured in the same rounds",
    )
    args = parser.parse_args(argv)
    baseline = None if args.baseline_kernel is None else load_baseline(args.baseline_kernel)
    rows = []
    header = f"{'env':28} {'N':>6} {'native steps/s':>15} {'minatar steps/s':>16} {'ratio':>7}"
    if baseline is not None:
        header += f" {'baseline steps/s':>17} {'ratio':>7} {'speedup':>8}"
    print(header)
    for env_id in args.env:
        for num_envs in args.num_envs:
            row = measure(env_id, num_envs, args.rounds, args.round_seconds, args.seed, baseline)
            rows.append(row)
            line = (
                f"{env_id:28} {num_envs:>6} {row['native_sps']:>15,.0f} "
                f"{row['minatar_sps']:>16,.0f} {row['ratio']:>6.0f}x"
            )
            if baseline is not None:
                line += (
                    f" {row['baseline_sps']:>17,.0f} {row['baseline_ratio']:>6.0f}x"
                    f" {row['speedup']:>7.2f}x"
                )
            print(line, flush=True)
    if args.json:
        record = {
            "date": datetime.date.today().isoformat(),
            "machine": platform.processor() or platform.machine(),
            "rounds": args.rounds,
            "round_seconds": args.round_seconds,
            "baseline_kernel": args.baseline_kernel,
            "rows": rows,
        }
        with open(args.json, "w") as file:
            json.dump(record, file, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
