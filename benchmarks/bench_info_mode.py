"""What env.info_mode costs: Gymnasium's `step()` in "full", "stats" and "none", beside
`step_bound()` (what the trainer calls, which builds no info), in alternating rounds.

Each round steps every variant for at least `--round-seconds`, with a random action batch from
a table made beforehand (copy=False: the arrays are the env's own). Figures are medians over
`--rounds` rounds of the time per batch step, in microseconds.

    flock /tmp/operant-bench.lock python benchmarks/bench_info_mode.py --json out.json
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

import numpy as np  # noqa: E402

from operant.envs import make_env  # noqa: E402

ACTION_TABLE = 64
VARIANTS = ("step_bound", "none", "stats", "full")


def stepper(env_id: str, num_envs: int, variant: str) -> Callable[[], None]:
    mode = "stats" if variant == "step_bound" else variant
    env = make_env(env_id, num_envs, copy=False, info_mode=mode)
    env.reset(seed=0)
    table = np.random.default_rng(0).integers(0, env.act_spec.num_actions, (ACTION_TABLE, num_envs))
    position = [0]

    if variant == "step_bound":

        def step() -> None:
            np.copyto(env.actions, table[position[0] % ACTION_TABLE])
            position[0] += 1
            env.step_bound()

    else:

        def step() -> None:
            env.step(table[position[0] % ACTION_TABLE])
            position[0] += 1

    return step


def seconds_per_step(step: Callable[[], None], seconds: float) -> float:
    calls = 0
    started = time.perf_counter()
    while True:
        step()
        calls += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return elapsed / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["MinAtar-Breakout-v1", "CartPole-v1"])
    parser.add_argument("--num-envs", nargs="+", type=int, default=[64, 1024])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--round-seconds", type=float, default=0.3)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    results = []
    for env_id in args.envs:
        for num_envs in args.num_envs:
            steps = {variant: stepper(env_id, num_envs, variant) for variant in VARIANTS}
            for step in steps.values():
                seconds_per_step(step, 0.1)
            times: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
            for _ in range(args.rounds):
                for variant, step in steps.items():
                    times[variant].append(seconds_per_step(step, args.round_seconds))
            row = {
                "env_id": env_id,
                "num_envs": num_envs,
                **{f"{v}_us": statistics.median(times[v]) * 1e6 for v in VARIANTS},
            }
            results.append(row)
            print(
                f"{env_id:22} N={num_envs:5} "
                + "  ".join(f"{v} {row[f'{v}_us']:8.1f} us" for v in VARIANTS)
            )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(
                {
                    "date": datetime.date.today().isoformat(),
                    "machine": platform.processor() or platform.machine(),
                    "command": "benchmarks/bench_info_mode.py",
                    "args": vars(args),
                    "results": results,
                },
                handle,
                indent=1,
            )


if __name__ == "__main__":
    main()
