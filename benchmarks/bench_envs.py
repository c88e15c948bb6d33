"""Env-only throughput of every env and implementation, next to Gymnasium's, in one run.

For each env and each N it times `step_bound()` of the native kernel and of the torch
implementation on the CPU, and `step(actions)` of Gymnasium's best vectorised form of the same
env: its own vector class where it has one (CartPole's `vector_entry_point`), else
SyncVectorEnv. Each figure is the median of several rounds of env steps per second (N env
steps per call); a round runs whole calls for at least `--round-seconds`, after one warm-up
call. Everything runs on one core: the kernels are single-threaded, Gymnasium's vector envs
step in one thread, and torch is held to one thread with torch.set_num_threads(1).

    python benchmarks/bench_envs.py                 # the full table (about 70 s)
    python benchmarks/bench_envs.py --env Pendulum-v1 --num-envs 4096 --json out.json

Exit status 1 when a native kernel is below `--min-ratio` (4 by default) times Gymnasium's at
N = 4096.
"""

from __future__ import annotations

import os

# One core: keep NumPy's BLAS from starting (and spinning) a thread pool of its own.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from operant.envs import ENVS, make_env  # noqa: E402

TARGET_NUM_ENVS = 4096


def _rounds(call: Callable[[], Any], num_envs: int, rounds: int, round_seconds: float) -> float:
    """Median env steps per second over `rounds` timed rounds, after one warm-up call."""
    call()
    rates = []
    for _ in range(rounds):
        calls = 0
        started = time.perf_counter()
        while True:
            call()
            calls += 1
            elapsed = time.perf_counter() - started
            if elapsed >= round_seconds:
                break
        rates.append(calls * num_envs / elapsed)
    return statistics.median(rates)


def _actions(space: gymnasium.spaces.Space, num_envs: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(space, gymnasium.spaces.Discrete):
        return rng.integers(0, space.n, size=num_envs)
    return rng.uniform(space.low, space.high, size=(num_envs, *space.shape)).astype(np.float32)


def _gymnasium_env(env_id: str, num_envs: int) -> tuple[gymnasium.vector.VectorEnv, str]:
    if gymnasium.spec(env_id).vector_entry_point is not None:
        return (
            gymnasium.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point"),
            "vector_entry_point",
        )
    return gymnasium.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync"), "sync"


def bench(env_id: str, num_envs: int, rounds: int, round_seconds: float) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    row: dict[str, Any] = {"env": env_id, "num_envs": num_envs}
    for impl in ("native", "torch"):
        env = make_env(env_id, num_envs, impl=impl, copy=False)
        env.reset(seed=0)
        actions = _actions(env.single_action_space, num_envs, rng)
        if impl == "torch":
            env.actions.copy_(torch.from_numpy(actions))
        else:
            env.actions[:] = actions
        row[impl] = _rounds(env.step_bound, num_envs, rounds, round_seconds)
        env.close()
    reference, mode = _gymnasium_env(env_id, num_envs)
    reference.reset(seed=0)
    actions = _actions(reference.single_action_space, num_envs, rng)
    row["gymnasium"] = _rounds(lambda: reference.step(actions), num_envs, rounds, round_seconds)
    row["gymnasium_mode"] = mode
    reference.close()
    row["native_vs_gymnasium"] = row["native"] / row["gymnasium"]
    row["torch_vs_gymnasium"] = row["torch"] / row["gymnasium"]
    return row


def _rate(value: float) -> str:
    return f"{value / 1e6:.2f}M" if value >= 1e6 else f"{value / 1e3:.0f}k"


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| env | N | native | torch (CPU, 1 thread) | Gymnasium (mode) | native / Gym | "
        "torch / Gym |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['env']} | {row['num_envs']} | {_rate(row['native'])} | "
            f"{_rate(row['torch'])} | {_rate(row['gymnasium'])} ({row['gymnasium_mode']}) | "
            f"{row['native_vs_gymnasium']:.1f}x | {row['torch_vs_gymnasium']:.1f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--env", action="append", choices=list(ENVS), help="env id (repeatable); default: every env"
    )
    parser.add_argument(
        "--num-envs", type=int, action="append", help="N (repeatable); default: 256, 4096, 16384"
    )
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per figure")
    parser.add_argument(
        "--round-seconds", type=float, default=0.25, help="minimum length of a round"
    )
    parser.add_argument(
        "--min-ratio", type=float, default=4.0, help="native / Gymnasium ratio required at N=4096"
    )
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for env_id in args.env or list(ENVS):
        for num_envs in args.num_envs or [256, TARGET_NUM_ENVS, 16384]:
            rows.append(bench(env_id, num_envs, args.rounds, args.round_seconds))
            print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"torch_threads": 1, "rows": rows}, file, indent=2)
    below = [
        row
        for row in rows
        if row["num_envs"] == TARGET_NUM_ENVS and row["native_vs_gymnasium"] < args.min_ratio
    ]
    for row in below:
        print(
            f"{row['env']}: native is {row['native_vs_gymnasium']:.1f}x Gymnasium at "
            f"N={TARGET_NUM_ENVS}, below {args.min_ratio}x",
            file=sys.stderr,
        )
    return 1 if below else 0


if __name__ == "__main__":
    sys.exit(main())
