"""The native kernels through Gymnasium's API, in one process, alternating round by round.

    python benchmarks/bench_gym_face.py [--num-envs 4096] [--rounds 9] [--steps 2000]

Paths: `step_bound()` (the kernel), `step(env.actions)` and `step(actions)` with copy=False,
and `step(actions)` with copy=True (Gymnasium's default), each on its own env made by
`gymnasium.make_vec("operant/CartPole-v1", vectorization_mode="vector_entry_point")`.
Prints one JSON line: each path's median microseconds per step and kernel / path.

    python benchmarks/bench_gym_face.py --copy [--num-envs 1024] [--rounds 9] [--steps 300]

copy=True against copy=False (issue 37 item 4) for MinAtar's five games and CartPole: two envs
of each id made by `make_vec(..., copy=True)` and `copy=False`, stepped as a user's loop steps
them (`obs, rewards, terminated, truncated, info = env.step(actions)`, so the previous step's
arrays are still held during a step), random actions from a table made beforehand, the two
alternating round by round (which goes first alternating too). Prints a table and one JSON
line: each env's median microseconds per step with each copy and the median of the rounds'
ratios, steps/s with copy=True over steps/s with copy=False.
"""

import argparse
import json
import statistics
import time

import gymnasium
import numpy as np

import operant.envs  # noqa: F401  (registers operant/*)

COPY_IDS = (
    "operant/MinAtar-Asterix-v1",
    "operant/MinAtar-Breakout-v1",
    "operant/MinAtar-Freeway-v1",
    "operant/MinAtar-Seaquest-v1",
    "operant/MinAtar-SpaceInvaders-v1",
    "operant/CartPole-v1",
)
ACTION_TABLE = 64


def user_loop(env, table: np.ndarray, steps: int) -> float:
    """Microseconds a step over `steps` steps of a user's loop: each step's arrays are held
    until the next step has returned, as `obs, ... = env.step(actions)` in a loop holds them."""
    started = time.perf_counter()
    for k in range(steps):
        obs, rewards, terminated, truncated, info = env.step(table[k % ACTION_TABLE])
    elapsed = time.perf_counter() - started
    del obs, rewards, terminated, truncated, info
    return elapsed / steps * 1e6


def copy_ratios(env_id: str, n: int, rounds: int, steps: int) -> dict:
    """copy=True against copy=False for `env_id`, alternating round by round."""
    envs = {}
    for copy in (False, True):
        envs[copy] = gymnasium.make_vec(
            env_id, num_envs=n, vectorization_mode="vector_entry_point", copy=copy
        )
        envs[copy].reset(seed=0)
    space = envs[False].single_action_space
    table = np.random.default_rng(0).integers(0, space.n, (ACTION_TABLE, n))
    for copy in (False, True):
        user_loop(envs[copy], table, max(steps // 10, 1))  # warm-up
    times: dict[bool, list[float]] = {False: [], True: []}
    for round_index in range(rounds):
        order = (False, True) if round_index % 2 == 0 else (True, False)
        for copy in order:
            times[copy].append(user_loop(envs[copy], table, steps))
    for env in envs.values():
        env.close()
    ratios = [live / copied for live, copied in zip(times[False], times[True])]
    return {
        "env_id": env_id,
        "us_per_step_copy_false": round(statistics.median(times[False]), 2),
        "us_per_step_copy_true": round(statistics.median(times[True]), 2),
        "ratio_true_over_false": round(statistics.median(ratios), 3),
        "ratio_rounds": [round(ratio, 3) for ratio in ratios],
    }


def main_copy(args: argparse.Namespace) -> None:
    results = []
    print(f"N = {args.num_envs}: steps/s with copy=True over copy=False, median of rounds")
    for env_id in COPY_IDS:
        result = copy_ratios(env_id, args.num_envs, args.rounds, args.steps)
        results.append(result)
        print(
            f"  {env_id:34} copy=False {result['us_per_step_copy_false']:8.1f} us"
            f"  copy=True {result['us_per_step_copy_true']:8.1f} us"
            f"  ratio {result['ratio_true_over_false']:.3f}",
            flush=True,
        )
    print(json.dumps({"num_envs": args.num_envs, "rounds": args.rounds, "results": results}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copy", action="store_true", help="copy=True against copy=False")
    parser.add_argument("--num-envs", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args()
    if args.copy:
        args.num_envs = args.num_envs or 1024
        args.steps = args.steps or 300
        main_copy(args)
        return
    n = args.num_envs = args.num_envs or 4096
    args.steps = args.steps or 2000

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
