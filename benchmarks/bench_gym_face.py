"""The native kernel through Gymnasium's API against its own step_bound(), in one process,
alternating round by round:

    python benchmarks/bench_gym_face.py [--num-envs 4096] [--rounds 9] [--steps 2000]

Paths: `step_bound()` (the kernel), `step(env.actions)` and `step(actions)` with copy=False,
and `step(actions)` with copy=True (Gymnasium's default), each on its own env made by
`gymnasium.make_vec("operant/CartPole-v1", vectorization_mode="vector_entry_point")`.
Prints one JSON line: each path's median microseconds per step and kernel / path.
"""

import argparse
import json
import statistics
import time

import gymnasium
import numpy as np

import operant.envs  # noqa: F401  (registers operant/*)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    n = args.num_envs

    def make(copy: bool):
        env = gymnasium.make_vec(
            "operant/CartPole-v1", num_envs=n, vectorization_mode="vector_entry_point", copy=copy
        )
        env.reset(seed=0)
        return env

    bound, live, copied = make(False), make(False), make(True)
    actions = np.random.default_rng(0).integers(0, 2, n)
    bound.actions[:] = live.actions[:] = actions
    paths = {
        "step_bound": bound.step_bound,
        "step(env.actions), copy=False": lambda: live.step(live.actions),
        "step(actions), copy=False": lambda: live.step(actions),
        "step(actions), copy=True": lambda: copied.step(actions),
    }
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(args.rounds):
        for name, step in paths.items():
            started = time.perf_counter()
            for _ in range(args.steps):
                step()
            times[name].append((time.perf_counter() - started) / args.steps * 1e6)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(
        json.dumps(
            {
                "num_envs": n,
                "us_per_step": {name: round(value, 2) for name, value in medians.items()},
                "kernel_over_path": {
                    name: round(medians["step_bound"] / value, 3) for name, value in medians.items()
                },
            }
        )
    )


if __name__ == "__main__":
    main()
